// dts console: what every page may use. Not vendored: the console's own.
//
// Refresh: a page whose changing part is marked data-refresh (the Job
// page, Dead letters, Workers, Scheduled) fetches itself again at the
// viewer's refresh choice (the header's select, shared with the live
// pages through localStorage) and swaps that part in place when it
// changed. It
// skips a round while the tab is hidden, while the viewer works in the
// part (a checked box, an open confirmation, focus inside), so nothing
// the viewer is doing is thrown away. Without JavaScript the header's
// Reload link does the same by hand.
//
// Select all: a checkbox input.select-all (shown only with JavaScript)
// checks or clears every box named by its data-for.
(function () {
  "use strict";
  var KEY = "dts.console.refresh";
  var CHOICES = ["0", "1", "2", "5", "10"];

  function showSelectAll() {
    document.querySelectorAll(".selectall").forEach(function (l) { l.hidden = false; });
  }
  showSelectAll();
  document.addEventListener("htmx:afterSwap", showSelectAll);
  document.addEventListener("change", function (e) {
    var box = e.target;
    if (!box.classList || !box.classList.contains("select-all")) {
      return;
    }
    document.querySelectorAll('input[type=checkbox][name="' + box.getAttribute("data-for") + '"]').forEach(function (c) {
      c.checked = box.checked;
    });
  });

  var select = document.getElementById("refresh");
  if (!select || document.getElementById("live") || !document.querySelector("[data-refresh]") || !window.htmx) {
    return;
  }
  var rounds = 0;
  var timer = 0;

  function choice() {
    var v = null;
    try {
      v = window.localStorage.getItem(KEY);
    } catch (e) { /* storage disabled: the default */ }
    return CHOICES.indexOf(v) >= 0 ? v : "2";
  }

  // busy says whether the viewer is working inside the part: a box
  // checked, a confirmation open, the pointer on a control, focus inside.
  function busy(part) {
    return part.querySelector("input[type=checkbox]:checked, details.confirm[open], button:hover, summary:hover, a:hover, input:hover") !== null ||
      (document.activeElement && document.activeElement !== document.body && part.contains(document.activeElement));
  }

  // round fetches the page again and swaps its part in, unless the part
  // is the same or the viewer started working in it while the page was on
  // its way (checked again right before the swap).
  function round() {
    var part = document.querySelector("[data-refresh]");
    if (!part || document.hidden || busy(part)) {
      schedule();
      return;
    }
    window.fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var now = document.querySelector("[data-refresh]");
        if (html === null || !now || busy(now)) {
          return;
        }
        var next = new window.DOMParser().parseFromString(html, "text/html").querySelector("[data-refresh]");
        if (next) {
          next.querySelectorAll(".selectall").forEach(function (l) { l.hidden = false; });
        }
        if (next && next.outerHTML !== now.outerHTML) {
          var node = document.importNode(next, true);
          now.replaceWith(node);
          window.htmx.process(node);
          showSelectAll();
        }
        rounds++;
      }, function () { /* unreachable: the next round tries again */ })
      .then(schedule);
  }

  function schedule() {
    window.clearTimeout(timer);
    var every = Number(choice());
    timer = every > 0 ? window.setTimeout(round, every * 1000) : 0;
  }

  select.value = choice();
  select.closest("label").hidden = false;
  select.addEventListener("change", function () {
    try {
      window.localStorage.setItem(KEY, select.value);
    } catch (e) { /* kept for this page only */ }
    schedule();
  });
  schedule();
  // For tests and the curious: how many refreshes this page made.
  window.dtsRefresh = { rounds: function () { return rounds; } };
}());
