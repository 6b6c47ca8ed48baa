// dts console: live updates (docs/ui.md, "Live updates"). Not vendored:
// this file is the console's own, served from the binary like the rest.
//
// htmx's SSE extension asks htmx.createEventSource for the page's one
// event source. This file answers with a LiveSource: it looks like an
// EventSource to the extension (addEventListener, removeEventListener,
// close), and behind it opens, closes and reopens the real stream as the
// viewer's refresh choice (off, 1, 2, 5, 10 s, kept in localStorage) and
// the tab's visibility say: no stream while the tab is hidden or the
// choice is off. Each stream starts from the version token of what the
// page shows, so the server names only the fragments that changed since.
// When streams keep failing (a proxy that buffers them, a server with too
// many), it polls live/poll instead; a poll starts only once the previous
// one has finished, so polls never overlap.
(function () {
  "use strict";
  var main = document.getElementById("live");
  var select = document.getElementById("refresh");
  if (!main || !window.htmx) {
    return;
  }
  var KEY = "dts.console.refresh";
  var CHOICES = ["0", "1", "2", "5", "10"];
  var current = null;

  function choice() {
    var v = null;
    try {
      v = window.localStorage.getItem(KEY);
    } catch (e) { /* storage disabled: the default */ }
    return CHOICES.indexOf(v) >= 0 ? v : "2";
  }

  function LiveSource(url) {
    this.url = url;
    this.v = main.getAttribute("data-live-v") || "";
    this.listeners = [];
    this.es = null;
    this.timer = 0;
    this.failures = 0;
    this.polling = false;
    this.closed = false;
    this.readyState = 0;
    this.onopen = null;
    this.onerror = null;
    current = this;
    this.apply();
  }

  LiveSource.prototype.addEventListener = function (type, fn) {
    this.listeners.push([type, fn]);
    if (this.es) {
      this.es.addEventListener(type, fn);
    }
  };

  LiveSource.prototype.removeEventListener = function (type, fn) {
    this.listeners = this.listeners.filter(function (l) { return l[0] !== type || l[1] !== fn; });
    if (this.es) {
      this.es.removeEventListener(type, fn);
    }
  };

  LiveSource.prototype.close = function () {
    this.closed = true;
    this.readyState = 2;
    this.stop();
  };

  LiveSource.prototype.stop = function () {
    if (this.es) {
      this.es.close();
      this.es = null;
    }
    window.clearTimeout(this.timer);
    this.timer = 0;
    this.polling = false;
  };

  // state says what the page does now: "off", "hidden", "stream", "poll".
  LiveSource.prototype.state = function () {
    if (this.es) {
      return "stream";
    }
    if (this.polling) {
      return "poll";
    }
    return document.hidden ? "hidden" : "off";
  };

  // apply starts what the choice and the tab's visibility call for.
  LiveSource.prototype.apply = function () {
    this.stop();
    var every = choice();
    if (this.closed || every === "0" || document.hidden) {
      return;
    }
    if (this.failures >= 3 || typeof window.EventSource === "undefined") {
      this.poll(Number(every));
      return;
    }
    var self = this;
    var es = new window.EventSource(this.url + "?every=" + every + "&v=" + encodeURIComponent(this.v));
    es.addEventListener("v", function (e) { self.v = e.data; });
    this.listeners.forEach(function (l) { es.addEventListener(l[0], l[1]); });
    es.onopen = function () {
      self.failures = 0;
      self.readyState = 1;
    };
    es.onerror = function () {
      if (self.es !== es) {
        return;
      }
      self.failures++;
      if (es.readyState === window.EventSource.CLOSED || self.failures >= 3) {
        // Refused, or failing again and again: start over, which polls
        // after the third failure.
        es.close();
        self.es = null;
        self.timer = window.setTimeout(function () { self.apply(); }, 1000 * self.failures);
      }
    };
    this.es = es;
  };

  // poll asks live/poll what changed every `every` seconds, each poll
  // starting after the previous one ended.
  LiveSource.prototype.poll = function (every) {
    var self = this;
    this.polling = true;
    function round() {
      if (!self.polling) {
        return;
      }
      window.fetch(self.url + "/poll?v=" + encodeURIComponent(self.v), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (d) {
          if (d && self.polling) {
            self.v = d.v;
            d.changed.forEach(function (t) { self.dispatch(t); });
          }
        }, function () { /* unreachable: try again at the next round */ })
        .then(function () {
          if (self.polling) {
            self.timer = window.setTimeout(round, every * 1000);
          }
        });
    }
    round();
  };

  LiveSource.prototype.dispatch = function (type) {
    var ev = new window.MessageEvent(type, { data: this.v });
    this.listeners.forEach(function (l) {
      if (l[0] === type) {
        l[1](ev);
      }
    });
  };

  window.htmx.createEventSource = function (url) { return new LiveSource(url); };

  if (select) {
    select.value = choice();
    select.closest("label").hidden = false;
    select.addEventListener("change", function () {
      try {
        window.localStorage.setItem(KEY, select.value);
      } catch (e) { /* kept for this page only */ }
      if (current) {
        current.apply();
      }
    });
  }
  document.addEventListener("visibilitychange", function () {
    if (current && !current.closed) {
      current.apply();
    }
  });
  // For tests and the curious: what the page does now.
  window.dtsLive = { state: function () { return current ? current.state() : "none"; } };
}());
