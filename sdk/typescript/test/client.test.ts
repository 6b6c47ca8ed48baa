// The client against a small HTTP server that plays the submitter: it
// answers from a script and records what it was sent.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { after, before, beforeEach, describe, it } from "node:test";

import { Client, DtsError } from "../dist/index.js";

interface Answer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}
interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

let server: Server;
let base = "";
let script: Answer[] = []; // answered in order; the last one repeats
let seen: Seen[] = [];

before(async () => {
  server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      const a = script.length > 1 ? script.shift()! : script[0]!;
      res.writeHead(a.status, { "Content-Type": "application/json", ...a.headers });
      res.end(typeof a.body === "string" ? a.body : JSON.stringify(a.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const addr = server.address();
  base = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}/api/`;
});

after(() => new Promise<void>((r) => server.close(() => r())));

beforeEach(() => {
  script = [];
  seen = [];
});

const apiError = (status: number, code: string, message: string, headers?: Record<string, string>): Answer => ({
  status,
  body: { error: { code, message } },
  ...(headers ? { headers } : {}),
});

describe("client", () => {
  it("submits with the API's field names and says whether the job was created", async () => {
    script = [{ status: 201, body: { job_id: "9007199254740993", status: "pending" } }, { status: 200, body: { job_id: "9007199254740993", status: "leased" } }];
    const c = new Client({ baseUrl: base, token: "dts_abc" });
    const first = await c.submit("send_email", { to: "a@b" }, { maxRetries: 5, timeoutSeconds: 30, idempotencyKey: "k1", runAt: new Date("2030-01-02T03:04:05Z") });
    assert.deepEqual(first, { job_id: "9007199254740993", status: "pending", created: true });
    const again = await c.submit("send_email", { to: "a@b" }, { idempotencyKey: "k1" });
    assert.equal(again.created, false);
    assert.equal(seen[0]!.method, "POST");
    assert.equal(seen[0]!.url, "/api/submit_job");
    assert.equal(seen[0]!.headers.authorization, "Bearer dts_abc");
    assert.deepEqual(JSON.parse(seen[0]!.body), {
      name: "send_email",
      payload: { to: "a@b" },
      max_retries: 5,
      timeout_seconds: 30,
      idempotency_key: "k1",
      run_at: "2030-01-02T03:04:05.000Z",
    });
  });

  it("submits a batch as an array and answers in order", async () => {
    script = [{ status: 201, body: { jobs: [{ job_id: "1", status: "pending" }, { job_id: "2", status: "waiting" }] } }];
    const c = new Client({ baseUrl: base });
    const out = await c.submitBatch([{ name: "a" }, { name: "b", payload: 1, dependsOnIndex: [0] }]);
    assert.deepEqual(out.map((j) => j.job_id), ["1", "2"]);
    assert.equal(seen[0]!.url, "/api/submit_jobs");
    assert.deepEqual(JSON.parse(seen[0]!.body), [{ name: "a" }, { name: "b", payload: 1, depends_on_index: [0] }]);
  });

  it("throws a DtsError carrying the API's status, code and message", async () => {
    script = [apiError(404, "not_found", "no job with id 5")];
    const c = new Client({ baseUrl: base });
    const err = await c.get("5").then(
      () => assert.fail("no error"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof DtsError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "not_found");
    assert.equal(err.apiMessage, "no job with id 5");
    assert.match(err.message, /404 not_found: no job with id 5/);
    assert.equal(seen.length, 1, "a 404 is not retried");
  });

  it("keeps the text of an answer that is not the API's error", async () => {
    script = [{ status: 502, body: "<html>bad gateway</html>" }];
    const err = (await new Client({ baseUrl: base }).get("1").catch((e: unknown) => e)) as DtsError;
    assert.equal(err.code, "");
    assert.equal(err.apiMessage, "<html>bad gateway</html>");
  });

  it("retries what the server did not act on, and only repeatable requests on other 503s", async () => {
    const c = new Client({ baseUrl: base });
    script = [apiError(503, "overloaded", "busy"), apiError(429, "rate_limited", "slow down"), { status: 201, body: { job_id: "3", status: "pending" } }];
    assert.equal((await c.submit("a")).job_id, "3");
    assert.equal(seen.length, 3);

    seen = [];
    script = [apiError(503, "store_unavailable", "down"), { status: 201, body: { job_id: "4", status: "pending" } }];
    await assert.rejects(c.submit("a"), (e: unknown) => e instanceof DtsError && e.code === "store_unavailable");
    assert.equal(seen.length, 1, "a submission without a key may have been stored: not retried");

    seen = [];
    script = [apiError(503, "store_unavailable", "down"), { status: 201, body: { job_id: "4", status: "pending" } }];
    assert.equal((await c.submit("a", null, { idempotencyKey: "k" })).job_id, "4");
    assert.equal(seen.length, 2, "a keyed submission is retried");

    seen = [];
    script = [apiError(503, "backlog_full", "full", { "Retry-After": "60" })];
    const t0 = Date.now();
    await assert.rejects(new Client({ baseUrl: base, maxRetryWaitMs: 1000 }).submit("a"), (e: unknown) => e instanceof DtsError && e.retryAfterMs === 60_000);
    assert.ok(Date.now() - t0 < 1000, "a Retry-After longer than maxRetryWaitMs is returned, not waited for");
  });

  it("waits for a job to end", async () => {
    const job = (status: string) => ({ status: 200, body: { job_id: "8", status, result: status === "completed" ? { ok: true } : null } });
    script = [job("pending"), job("leased"), job("leased"), job("completed")];
    const c = new Client({ baseUrl: base, pollIntervalMs: 100 });
    const j = await c.wait("8");
    assert.equal(j.status, "completed");
    assert.deepEqual(j.result, { ok: true });
    assert.equal(seen.length, 4);
    assert.ok(seen.every((s) => s.method === "GET" && s.url === "/api/jobs/8"));

    script = [job("leased")];
    await assert.rejects(c.wait("8", { timeoutMs: 200 }), /timed out/);
  });
});
