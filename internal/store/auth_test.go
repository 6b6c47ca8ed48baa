package store_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/dtsched/dts/internal/auth"
	"github.com/dtsched/dts/internal/job"
	"github.com/dtsched/dts/internal/store"
)

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	key, hash := auth.NewAPIKey()
	k, err := e.s.APIKeyInsert(e.ctx, store.APIKeyInsertParams{Name: "ci", Hash: hash, Scopes: []string{"read", "submit"},
		TTL: time.Hour, Actor: "cli:test"})
	if err != nil {
		t.Fatal(err)
	}
	if k.ID <= 0 || k.Name != "ci" || len(k.Scopes) != 2 || k.ExpiresAt == nil || k.RevokedAt != nil {
		t.Fatalf("inserted %+v", k)
	}
	within(t, "expires_at", *k.ExpiresAt, k.CreatedAt.Add(time.Hour), time.Second)
	var stored string
	e.scalar(t, &stored, `SELECT hash FROM api_keys WHERE id = $1`, k.ID)
	if stored != hash || stored == key {
		t.Errorf("stored %q, want the hash", stored)
	}

	// The lookup finds it by hash and records its use.
	got, err := e.s.APIKeyByHash(e.ctx, auth.HashSecret(key))
	if err != nil || got.ID != k.ID || got.LastUsedAt == nil {
		t.Fatalf("APIKeyByHash = %+v, %v", got, err)
	}
	if _, err := e.s.APIKeyByHash(e.ctx, auth.HashSecret("dts_nope")); !errors.Is(err, auth.ErrKeyNotFound) {
		t.Errorf("unknown hash: %v, want ErrKeyNotFound", err)
	}

	// No expiry; a repeated hash is a conflict; bad scopes are refused by the table.
	_, h2 := auth.NewAPIKey()
	forever, err := e.s.APIKeyInsert(e.ctx, store.APIKeyInsertParams{Name: "forever", Hash: h2, Scopes: []string{"admin"}, Actor: "t"})
	if err != nil || forever.ExpiresAt != nil {
		t.Fatalf("no-ttl key = %+v, %v", forever, err)
	}
	if _, err := e.s.APIKeyInsert(e.ctx, store.APIKeyInsertParams{Name: "dup", Hash: h2, Scopes: []string{"read"}, Actor: "t"}); !errors.Is(err, job.ErrConflict) {
		t.Errorf("duplicate hash: %v, want ErrConflict", err)
	}
	_, h3 := auth.NewAPIKey()
	if _, err := e.s.APIKeyInsert(e.ctx, store.APIKeyInsertParams{Name: "x", Hash: h3, Scopes: []string{"root"}, Actor: "t"}); err == nil {
		t.Error("scope root accepted by the table")
	}

	list, err := e.s.APIKeyList(e.ctx)
	if err != nil || len(list) != 2 || list[0].ID != forever.ID {
		t.Fatalf("list = %+v, %v", list, err)
	}

	// Revoke, twice: the first time stays.
	r1, err := e.s.APIKeyRevoke(e.ctx, k.ID, "api_key:2:forever")
	if err != nil || r1.RevokedAt == nil {
		t.Fatalf("revoke = %+v, %v", r1, err)
	}
	r2, err := e.s.APIKeyRevoke(e.ctx, k.ID, "api_key:2:forever")
	if err != nil || !r2.RevokedAt.Equal(*r1.RevokedAt) {
		t.Fatalf("second revoke = %+v, %v", r2, err)
	}
	if _, err := e.s.APIKeyRevoke(e.ctx, 999, "t"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("revoke unknown: %v", err)
	}
	got, _ = e.s.APIKeyByHash(e.ctx, auth.HashSecret(key))
	if got.RevokedAt == nil {
		t.Error("lookup of a revoked key does not say so")
	}

	// Audit: create, create, revoke, revoke (failed attempts write nothing).
	entries, next, err := e.s.AuditList(e.ctx, 10, 0)
	if err != nil || next != 0 {
		t.Fatal(err, next)
	}
	want := []string{store.AuditTokenRevoke, store.AuditTokenRevoke, store.AuditTokenCreate, store.AuditTokenCreate}
	if len(entries) != len(want) {
		t.Fatalf("audit = %+v", entries)
	}
	for i, a := range want {
		if entries[i].Action != a || entries[i].TargetType != store.AuditTargetAPIKey {
			t.Errorf("audit[%d] = %+v, want %s", i, entries[i], a)
		}
	}
	if entries[3].Actor != "cli:test" || entries[3].TargetID != strconv.FormatInt(k.ID, 10) {
		t.Errorf("audit create = %+v", entries[3])
	}
	var d map[string]any
	if err := json.Unmarshal(entries[0].Details, &d); err != nil || d["already_revoked"] != true || d["name"] != "ci" {
		t.Errorf("audit revoke details = %s", entries[0].Details)
	}
}

func TestAuditLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []int64
	for i := range 5 {
		id, err := e.s.AuditInsert(e.ctx, store.AuditEntry{Actor: "anonymous", Action: store.AuditJobCancel,
			TargetType: store.AuditTargetJob, TargetID: strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := e.s.AuditSetOutcome(e.ctx, ids[4], map[string]any{"status": 200, "result": "canceled"}); err != nil {
		t.Fatal(err)
	}
	page, next, err := e.s.AuditList(e.ctx, 2, 0)
	if err != nil || len(page) != 2 || page[0].ID != ids[4] || next != ids[3] {
		t.Fatalf("page 1 = %+v next %d, %v", page, next, err)
	}
	if !jsonEqual(t, page[0].Details, []byte(`{"status":200,"result":"canceled"}`)) || !jsonEqual(t, page[1].Details, []byte(`{}`)) {
		t.Errorf("details %s %s", page[0].Details, page[1].Details)
	}
	page, next, err = e.s.AuditList(e.ctx, 10, next)
	if err != nil || len(page) != 3 || next != 0 || page[2].ID != ids[0] {
		t.Fatalf("page 2 = %+v next %d, %v", page, next, err)
	}
}

func TestWorkerCredentials(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, h1 := auth.NewWorkerCredential()
	_, h2 := auth.NewWorkerCredential()
	_, h3 := auth.NewWorkerCredential()
	for _, c := range []struct{ worker, hash string }{{"w1", h1}, {"w1", h2}, {"w2", h3}} {
		if _, err := e.s.WorkerCredentialInsert(e.ctx, c.worker, c.hash, "cli:test"); err != nil {
			t.Fatal(err)
		}
	}
	hashes, err := e.s.WorkerCredentialHashes(e.ctx)
	if err != nil || len(hashes["w1"]) != 2 || len(hashes["w2"]) != 1 || hashes["w2"][0] != h3 {
		t.Fatalf("hashes = %v, %v", hashes, err)
	}
	n, err := e.s.WorkerCredentialRevoke(e.ctx, "w1", "cli:test")
	if err != nil || n != 2 {
		t.Fatalf("revoke = %d, %v", n, err)
	}
	hashes, _ = e.s.WorkerCredentialHashes(e.ctx)
	if len(hashes["w1"]) != 0 || len(hashes["w2"]) != 1 {
		t.Errorf("after revoke: %v", hashes)
	}
	list, err := e.s.WorkerCredentialList(e.ctx)
	if err != nil || len(list) != 3 || list[1].RevokedAt == nil || list[0].RevokedAt != nil {
		t.Fatalf("list = %+v, %v", list, err)
	}
	var audits int
	e.scalar(t, &audits, `SELECT count(*) FROM audit_log WHERE target_type = 'worker_credential'`)
	if audits != 4 {
		t.Errorf("%d audit rows, want 4", audits)
	}
}
