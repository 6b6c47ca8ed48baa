package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/dtsched/dts/internal/httpx"
)

// A body budget holds the bytes of the request bodies in progress under
// its size: a body that does not fit beside the others is answered 503
// overloaded at once, before it is read, and fits again once they end. A
// body larger than the whole budget still runs alone.
func TestBodyBudget(t *testing.T) {
	t.Parallel()
	budget := httpx.NewBodyBudget(1000)
	entered, release := make(chan struct{}), make(chan struct{})
	r := chi.NewRouter()
	r.With(budget.LimitBody(2000)).Post("/", httpx.Handler(func(w http.ResponseWriter, r *http.Request) error {
		b, err := httpx.ReadBody(r)
		if err != nil {
			return err
		}
		if string(b) == strings.Repeat("h", 600) { // the one that holds its bytes
			entered <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	post := func(body string) (int, string) {
		resp, err := http.Post(srv.URL, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}

	held := make(chan int)
	go func() { code, _ := post(strings.Repeat("h", 600)); held <- code }()
	<-entered
	if code, retry := post(strings.Repeat("x", 600)); code != http.StatusServiceUnavailable || retry != "1" {
		t.Errorf("600 bytes beside 600 held of 1000: %d, Retry-After %q; want 503 with Retry-After 1", code, retry)
	}
	if code, _ := post(strings.Repeat("x", 300)); code != http.StatusNoContent {
		t.Errorf("300 bytes beside 600 held of 1000: %d, want 204", code)
	}
	close(release)
	if code := <-held; code != http.StatusNoContent {
		t.Errorf("the held request: %d", code)
	}
	if code, _ := post(strings.Repeat("x", 600)); code != http.StatusNoContent {
		t.Errorf("600 bytes once the others ended: %d, want 204", code)
	}
	if code, _ := post(strings.Repeat("x", 1500)); code != http.StatusNoContent {
		t.Errorf("1500 bytes alone, over the budget but within the route's limit: %d, want 204", code)
	}
	if code, _ := post(strings.Repeat("x", 2500)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("2500 bytes over the route's limit: %d, want 413", code)
	}
}
