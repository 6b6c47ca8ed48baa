package ui_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dtsched/dts/internal/pgtest"
	"github.com/dtsched/dts/internal/redistest"
	"github.com/dtsched/dts/internal/store/storetest"
	"github.com/dtsched/dts/internal/testwait"
	"github.com/dtsched/dts/internal/wire"
	"github.com/dtsched/dts/submitter"
)

// BenchmarkConsole1M measures the server time of each kind of console
// page on a table of 1,000,000 jobs in mixed states (storetest.FillJobs:
// 65 % completed, 10 % failed, 3 % canceled, 12 % pending, 8 % retrying,
// 2 % leased; one job with 25 attempts; every tenth job keyed): each
// sub-benchmark serves its page 20 times after one warm-up, through the
// submitter's handler in process (no network), and reports the p95 and
// p50 in milliseconds. first_load reports the gzipped size of a page
// and everything it loads; requeue_all_100k requeues the 100,000 dead
// jobs in the background while the Jobs page is served, and reports how
// long the operation took and the Jobs page's p95 meanwhile.
//
// Run it with: go test -run '^$' -bench Console1M -benchtime 1x
// github.com/dtsched/dts/submitter/ui (docs/benchmarks.md, "Console on
// 1M jobs"). Building the fixture takes about half a minute.
func BenchmarkConsole1M(b *testing.B) {
	const jobs = 1_000_000
	dbURL := pgtest.NewDatabase(b)
	t0 := time.Now()
	fx, err := storetest.FillJobs(b.Context(), dbURL, jobs)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("fixture: %d jobs in %s", jobs, time.Since(t0).Round(time.Millisecond))
	srv, err := submitter.New(b.Context(), submitter.Config{DatabaseURL: dbURL, RedisURL: redistest.URL(), RedisPrefix: redistest.Prefix(b)}, slogFor(b))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	h := srv.Handler()
	db, err := pgxpool.New(b.Context(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	// The last id of page 99 of a search: the before of page 100.
	page100 := func(where string) string {
		var id int64
		if err := db.QueryRow(b.Context(), `SELECT id FROM jobs WHERE `+where+` ORDER BY id DESC OFFSET 4949 LIMIT 1`).Scan(&id); err != nil {
			b.Fatalf("page 100 of %s: %v", where, err)
		}
		return strconv.FormatInt(id, 10)
	}
	jobsURL := func(q string) string { return "/ui/jobs?q=" + url.QueryEscape(q) }
	pages := []struct{ name, target string }{
		{"overview", "/ui/"},
		{"queues", "/ui/queues"},
		{"jobs_first", "/ui/jobs"},
		{"jobs_page100", "/ui/jobs?q=&before=" + page100("true")},
		{"jobs_state_failed", jobsURL("state:failed")},
		{"jobs_state_failed_page100", jobsURL("state:failed") + "&before=" + page100("status = 'failed'")},
		{"jobs_state_pending", jobsURL("state:pending")},
		{"jobs_state_leased", jobsURL("state:leased")},
		{"jobs_state_leased_page100", jobsURL("state:leased") + "&before=" + page100("status = 'leased'")},
		{"jobs_state_completed", jobsURL("state:completed")},
		{"jobs_queue_reports", jobsURL("queue:reports")},
		{"jobs_queue_reports_page100", jobsURL("queue:reports") + "&before=" + page100("queue = 'reports'")},
		{"jobs_state_failed_queue_mail", jobsURL("state:failed queue:mail")},
		{"jobs_name_report", jobsURL("name:report")},
		{"jobs_name_rare_unindexed", jobsURL("name:rare_job")},
		{"job_25_attempts", "/ui/jobs/" + strconv.FormatInt(fx.ManyAttempts, 10)},
		{"lookup_id", jobsURL("id:" + strconv.FormatInt(fx.KeyID, 10))},
		{"lookup_key", jobsURL("key:" + fx.Key)},
		{"payload_search_found", jobsURL(`payload:"customer 42\""`)},                     // 1 job in 977
		{"payload_search_state_failed", jobsURL(`state:failed payload:"customer 42\""`)}, // 1 in 9,770
		{"payload_search_nowhere", jobsURL("payload:nowhere-to-be-found")},               // reads every payload, or stops
		{"dlq", "/ui/dlq"}, // its groups are counted once per groupsEvery: the first view of each round counts
		{"jobs_dead_group_large", jobsURL(`state:failed name:send_email fingerprint:"timeout after <dur>"`)},
		{"jobs_dead_group_small", jobsURL(`state:failed name:report fingerprint:"HTTP <n> from <url>"`)},
		{"bulk_confirm_dead_group", "/ui/bulk?action=requeue&from=dlq&q=" + url.QueryEscape(`state:failed name:report fingerprint:"HTTP <n> from <url>"`)},
		{"scheduled", "/ui/scheduled"},
		{"workers", "/ui/workers"},
		{"bulk_confirm_requeue", "/ui/bulk?action=requeue&from=dlq&q=" + url.QueryEscape("state:failed")},
		{"api_stats", "/stats"},   // the refresher's read behind the Overview, once a second while watched
		{"api_queues", "/queues"}, // and the queues table's
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			var ds []time.Duration
			for range b.N {
				serveOK(b, h, "GET", p.target, "") // warm-up
				for range 20 {
					start := time.Now()
					serveOK(b, h, "GET", p.target, "")
					ds = append(ds, time.Since(start))
				}
			}
			reportQuantiles(b, ds, "")
		})
	}
	b.Run("first_load", func(b *testing.B) {
		for range b.N {
			most := 0
			for _, page := range []string{"/ui/", "/ui/jobs", "/ui/queues"} {
				most = max(most, firstLoad(b, h, page))
			}
			b.ReportMetric(float64(most)/1024, "gzip-KB")
		}
	})
	b.Run("requeue_all_100k", func(b *testing.B) {
		for range b.N {
			var op wire.BulkResponse
			start := time.Now()
			if err := json.Unmarshal(serveOK(b, h, "POST", "/jobs/bulk", `{"action":"requeue","status":"failed","background":true}`), &op); err != nil {
				b.Fatal(err)
			}
			if op.Matched < 100_000 || op.OperationID == "" {
				b.Fatalf("requeue all: %+v, want 100,000 or more dead jobs in an operation", op)
			}
			var ds []time.Duration
			// A jobs page at every poll while the requeue runs.
			testwait.For(b, 5*time.Minute, "the requeue to end", func() bool {
				t := time.Now()
				serveOK(b, h, "GET", "/ui/jobs", "")
				ds = append(ds, time.Since(t))
				var o wire.Operation
				if err := json.Unmarshal(serveOK(b, h, "GET", "/operations/"+op.OperationID, ""), &o); err != nil {
					b.Fatal(err)
				}
				if o.State != wire.OperationRunning {
					if o.State != wire.OperationDone || o.Affected != op.Matched {
						b.Fatalf("operation ended %+v", o)
					}
					return true
				}
				return false
			})
			b.ReportMetric(time.Since(start).Seconds(), "requeue-s")
			reportQuantiles(b, ds, "jobs-")
		}
	})
}

// serveOK serves one request through h and fails unless it answers 2xx.
func serveOK(b *testing.B, h http.Handler, method, target, body string) []byte {
	b.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code >= 300 {
		b.Fatalf("%s %s: %d %.500s", method, target, w.Code, w.Body.String())
	}
	return w.Body.Bytes()
}

func reportQuantiles(b *testing.B, ds []time.Duration, prefix string) {
	slices.Sort(ds)
	q := func(p float64) float64 {
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds)-1)+0.5))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.95), prefix+"p95-ms")
	b.ReportMetric(q(0.50), prefix+"p50-ms")
	b.ReportMetric(0, "ns/op") // the quantiles are the figures
}

var assetRe = regexp.MustCompile(`(?:src|href)="(\./static/[^"]+|(?:\.\./)+static/[^"]+)"`)

// firstLoad is the gzipped size of page and the static files it loads.
func firstLoad(b *testing.B, h http.Handler, page string) int {
	b.Helper()
	html := serveOK(b, h, "GET", page, "")
	total := gzipSize(html)
	base, _ := url.Parse(page)
	for _, m := range assetRe.FindAllSubmatch(html, -1) {
		ref, _ := url.Parse(string(m[1]))
		total += gzipSize(serveOK(b, h, "GET", base.ResolveReference(ref).String(), ""))
	}
	return total
}

func gzipSize(p []byte) int {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.DefaultCompression)
	_, _ = io.Copy(zw, bytes.NewReader(p))
	_ = zw.Close()
	return buf.Len()
}
