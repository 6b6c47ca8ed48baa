// The worker's rules, checked by playing the coordinator's side of the wire
// against a real redis-server: deliveries and cancels pushed onto the
// worker's lists, results and heartbeats read from the streams.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, it } from "node:test";

import { discardLogger, PermanentError, RawJSON, Worker, type Handler, type WorkerOptions } from "../dist/index.js";
import { rawFields, int64Field, type RawFields } from "../dist/json.js";
import { decodeDelivery, progressMessage } from "../dist/worker.js";
import { BlackholeProxy, RedisServer, waitFor, within, type TestRedisClient } from "./redis.js";
import { checkMessage } from "./schema.js";

// The server the tests share, each with its own key prefix and worker id.
const shared = { server: new RedisServer(), rdb: undefined as unknown as TestRedisClient };
const server = shared.server;
let rdb: TestRedisClient;

before(async () => {
  await server.start();
  rdb = shared.rdb = await server.client();
});

// Workers a test started and did not stop (it failed first): stopped
// here, or their Redis clients, reconnecting for ever, would keep node
// from exiting and the run would hang instead of reporting the failure.
const live = new Set<Harness>();

after(async () => {
  for (const h of live) await within(10_000, `worker ${h.id} to stop after its test`, h.stop()).catch(() => h.w.stop());
  rdb?.destroy();
  await server.close();
});

interface Sent {
  id: string; // stream entry id
  at: number; // its time (ms)
  f: RawFields;
  jobId: string;
  token: string;
  outcome: string;
  reason?: string;
  error?: string;
  result?: string; // raw JSON
  progress?: number;
  message?: string;
}

let seq = 0;

// Harness is one worker under test, with its own key prefix.
class Harness {
  readonly n = ++seq;
  readonly prefix = `t${this.n}:`;
  readonly id = `worker-${this.n}`;
  readonly w: Worker;
  private done?: Promise<void>;

  constructor(
    opts: Partial<WorkerOptions> = {},
    private readonly rdb: TestRedisClient = shared.rdb,
    srv: RedisServer = shared.server,
  ) {
    this.w = new Worker({
      id: this.id,
      redisUrl: srv.url,
      redisPrefix: this.prefix,
      heartbeatIntervalMs: 100,
      shutdownGraceMs: 500,
      handleSignals: false,
      logger: discardLogger,
      ...opts,
    });
  }

  handle(name: string, h: Handler): this {
    this.w.handle(name, h);
    return this;
  }

  start(): this {
    this.done = this.w.run();
    live.add(this);
    return this;
  }

  async stop(): Promise<void> {
    this.w.stop();
    await this.done;
    live.delete(this);
  }

  /** deliver pushes deliveries (job_id and lease_token as decimal text) as the coordinator does. */
  async deliver(...ds: Array<{ jobId: string; token: string; name: string; payload?: string; attempt?: number; timeoutSeconds?: number }>): Promise<void> {
    const texts = ds.map(
      (d) =>
        `{"job_id":${d.jobId},"name":${JSON.stringify(d.name)},"queue":"default","payload":${d.payload ?? "null"},` +
        `"attempt":${d.attempt ?? 1},"max_retries":3${d.timeoutSeconds ? `,"timeout_seconds":${d.timeoutSeconds}` : ""},` +
        `"lease_token":${d.token},"created_at":"2026-11-27T00:00:00Z"}`,
    );
    for (const t of texts) checkMessage("delivery", t);
    await this.rdb.sendCommand(["LPUSH", `${this.prefix}dts:worker:${this.id}:jobs`, ...texts]);
  }

  async cancel(jobId: string, token: string): Promise<void> {
    const text = `{"op":"cancel","job_id":${jobId},"lease_token":${token}}`;
    checkMessage("control", text);
    await this.rdb.sendCommand(["LPUSH", `${this.prefix}dts:worker:${this.id}:control`, text]);
  }

  async results(): Promise<Sent[]> {
    const entries = (await this.rdb.sendCommand(["XRANGE", `${this.prefix}dts:results`, "-", "+"])) as Array<[string, string[]]>;
    return entries.map(([id, kv]) => {
      assert.equal(kv[0], "r");
      checkMessage("result", kv[1]!); // every result any test reads is checked against the spec
      const f = rawFields(kv[1]!);
      const s: Sent = { id, at: Number(id.split("-")[0]), f, jobId: int64Field(f, "job_id"), token: int64Field(f, "lease_token"), outcome: JSON.parse(f.get("outcome")!) };
      for (const k of ["reason", "error", "message"] as const) if (f.has(k)) s[k] = JSON.parse(f.get(k)!);
      if (f.has("progress")) s.progress = JSON.parse(f.get("progress")!);
      if (f.has("result")) s.result = f.get("result")!;
      assert.equal(JSON.parse(f.get("worker_id")!), this.id);
      return s;
    });
  }

  /** outcomes are the results other than progress reports. */
  async outcomes(): Promise<Sent[]> {
    return (await this.results()).filter((r) => r.outcome !== "progress");
  }

  async waitOutcomes(n: number, what = `${n} outcomes`): Promise<Sent[]> {
    return waitFor(what, async () => {
      const rs = await this.outcomes();
      return rs.length >= n ? rs : undefined;
    });
  }

  /** heartbeats returns the heartbeats sent so far, each's raw text and decoded value. */
  async heartbeats(): Promise<Array<{ text: string; hb: Record<string, unknown> }>> {
    const entries = (await this.rdb.sendCommand(["XRANGE", `${this.prefix}dts:heartbeats`, "-", "+"])) as Array<[string, string[]]>;
    return entries.map(([, kv]) => {
      assert.equal(kv[0], "h");
      checkMessage("heartbeat", kv[1]!); // and every heartbeat
      return { text: kv[1]!, hb: JSON.parse(kv[1]!) as Record<string, unknown> };
    });
  }
}

// gate is a promise a test resolves by hand.
function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { wait, open };
}

function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

// Each test has its own worker and key prefix, so they run at once.
describe("worker", { concurrency: true }, () => {
  it("registers with a heartbeat that says what it runs", async () => {
    const h = new Harness({ concurrency: 3, credential: "s3cret" }).handle("a", () => 1).handle("b", () => 2).start();
    const [first] = await waitFor("a heartbeat", async () => {
      const hbs = await h.heartbeats();
      return hbs.length > 0 ? hbs : undefined;
    });
    const hb = first!.hb;
    assert.equal(hb.worker_id, h.id);
    assert.deepEqual((hb.job_types as string[]).sort(), ["a", "b"]);
    assert.equal(hb.concurrency, 3);
    assert.equal(hb.prefetch, 32, "the default prefetch, as the worker binary's");
    assert.deepEqual(hb.in_flight, []);
    assert.equal(hb.credential, "s3cret");
    assert.equal(hb.codec, undefined, "a JSON-only worker announces codec 0 by leaving it out");
    assert.equal(hb.protocol, 1);
    assert.equal(typeof hb.host, "string");
    assert.match(String(hb.version), /^ts-/);
    assert.ok(!Number.isNaN(Date.parse(String(hb.sent_at))));
    await h.stop();
    const last = (await h.heartbeats()).at(-1)!.hb;
    assert.equal(last.stopped, true);
    assert.equal(last.draining, true);
  });

  it("announces its queues and prefetch; prefetched jobs wait for a slot", async () => {
    const started = gate();
    const release = gate();
    const h = new Harness({ concurrency: 1, prefetch: 2, queues: [{ name: "critical", weight: 6 }, { name: "low", weight: 0 }] }).handle("q", async () => {
      started.open();
      await release.wait;
    });
    await h.deliver({ jobId: "81", token: "1081", name: "q" }, { jobId: "82", token: "1082", name: "q" }, { jobId: "83", token: "1083", name: "q" }, { jobId: "84", token: "1084", name: "q" });
    h.start();
    await started.wait;
    const hb = await waitFor("a heartbeat holding one running and two waiting jobs", async () => {
      const last = (await h.heartbeats()).at(-1)?.hb;
      const f = (last?.in_flight ?? []) as Array<{ started?: boolean; waiting?: boolean }>;
      return f.filter((x) => x.started).length === 1 && f.filter((x) => x.waiting).length >= 2 ? last : undefined;
    });
    assert.deepEqual(hb.queues, [{ name: "critical", weight: 6 }, { name: "low", weight: 0 }]);
    assert.equal(hb.prefetch, 2);
    release.open();
    await h.waitOutcomes(4);
    await h.stop();
    assert.throws(() => new Worker({ redisUrl: server.url, queues: [] }), /empty/);
    assert.throws(() => new Worker({ redisUrl: server.url, queues: [{ name: "a b", weight: 1 }] }), /characters/);
    assert.throws(() => new Worker({ redisUrl: server.url, prefetch: -1 }), /prefetch/);
  });

  it("runs each lease once and reports one outcome per token", async () => {
    let calls = 0;
    const h = new Harness().handle("once", (job) => {
      calls++;
      return { job: job.id, attempt: job.attempt };
    });
    // The same lease delivered three times before the worker starts, and once after its result.
    await h.deliver({ jobId: "7", token: "1001", name: "once" }, { jobId: "7", token: "1001", name: "once" }, { jobId: "7", token: "1001", name: "once" });
    h.start();
    const [r] = await h.waitOutcomes(1);
    await h.deliver({ jobId: "7", token: "1001", name: "once" }, { jobId: "8", token: "1002", name: "once" });
    await h.waitOutcomes(2);
    await h.stop();
    const rs = await h.outcomes();
    assert.equal(calls, 2);
    assert.deepEqual(rs.map((x) => [x.jobId, x.token, x.outcome]), [["7", "1001", "completed"], ["8", "1002", "completed"]]);
    assert.deepEqual(JSON.parse(r!.result!), { job: "7", attempt: 1 });
  });

  it("keeps 63-bit lease tokens and 64-bit job ids exact", async () => {
    const jobId = "9007199254740993"; // 2^53 + 1: JSON.parse makes it ...992
    const token = "9223372036854775807"; // the largest int64
    const seen = gate();
    const release = gate();
    const h = new Harness().handle("big", async (job) => {
      seen.open();
      await release.wait;
      return new RawJSON(job.payloadText);
    });
    h.start();
    await h.deliver({ jobId, token, name: "big", payload: `{"n":12345678901234567890123}` });
    await seen.wait;
    // The heartbeat names the lease with its exact digits.
    await waitFor("a heartbeat naming the big lease", async () =>
      (await h.heartbeats()).some((x) => x.text.includes(`{"job_id":${jobId},"lease_token":${token},"started":true`)),
    );
    await h.cancel(jobId, "9223372036854775806"); // a neighbouring token: not this lease
    release.open();
    const [r] = await h.waitOutcomes(1);
    await h.stop();
    assert.equal(r!.jobId, jobId);
    assert.equal(r!.token, token);
    assert.equal(r!.outcome, "completed");
    assert.equal(r!.result, `{"n":12345678901234567890123}`);
  });

  it("supersedes an older lease of the same job by a newer one", async () => {
    const started = gate();
    const h = new Harness({ concurrency: 2 }).handle("long", async (job, { signal }) => {
      if (job.attempt === 1) {
        started.open();
        await untilAborted(signal);
      }
      return "second";
    });
    h.start();
    await h.deliver({ jobId: "5", token: "111", name: "long", attempt: 1 });
    await started.wait;
    await h.deliver({ jobId: "5", token: "222", name: "long", attempt: 2 });
    const rs = await h.waitOutcomes(2);
    // A late copy of the old lease is not run again.
    await h.deliver({ jobId: "5", token: "111", name: "long", attempt: 1 });
    await h.stop();
    const byToken = new Map((await h.outcomes()).map((x) => [x.token, x]));
    assert.equal(byToken.size, 2, JSON.stringify(rs));
    assert.equal(byToken.get("111")!.outcome, "released");
    assert.equal(byToken.get("111")!.reason, "superseded");
    assert.equal(byToken.get("222")!.outcome, "completed");
  });

  it("cancels a lease whose cancel arrived before its delivery", async () => {
    let calls = 0;
    const h = new Harness().handle("c", () => {
      calls++;
      return null;
    });
    await h.cancel("9", "333");
    await h.deliver({ jobId: "9", token: "333", name: "c" });
    h.start();
    const [r] = await h.waitOutcomes(1);
    await h.stop();
    assert.equal(calls, 0);
    assert.equal(r!.outcome, "failed");
    assert.equal(r!.reason, "canceled");
    assert.equal(r!.token, "333");
  });

  it("aborts a running attempt on cancel", async () => {
    const started = gate();
    const h = new Harness().handle("c", async (_job, { signal }) => {
      started.open();
      await untilAborted(signal);
    });
    h.start();
    await h.deliver({ jobId: "10", token: "444", name: "c" });
    await started.wait;
    await h.cancel("10", "0"); // no token: the job's newest lease here
    const [r] = await h.waitOutcomes(1);
    await h.stop();
    assert.deepEqual([r!.outcome, r!.reason, r!.error], ["failed", "canceled", "canceled"]);
  });

  it("aborts a signal read after the cancel, and never runs a canceled job waiting for a slot", async () => {
    // The signal is made when the handler first reads it: one read after
    // the cancel must still come aborted, with the cancel's reason.
    const started = gate();
    const canceled = gate();
    const ran: string[] = [];
    let reason: unknown;
    const h = new Harness({ concurrency: 1, prefetch: 1 }).handle("w", async (job, ctx) => {
      ran.push(job.id);
      started.open();
      await canceled.wait;
      reason = ctx.signal.aborted ? ctx.signal.reason : undefined;
    });
    h.start();
    await h.deliver({ jobId: "91", token: "1091", name: "w" }, { jobId: "92", token: "1092", name: "w" });
    await started.wait;
    await h.cancel("91", "1091");
    await h.cancel("92", "1092"); // waiting for the slot 91 holds
    const [first] = await h.waitOutcomes(1); // both cancels were read: 91's came first
    assert.equal(first!.jobId, "92");
    canceled.open();
    const rs = await h.waitOutcomes(2);
    await h.stop();
    assert.deepEqual(ran, ["91"]);
    assert.deepEqual(rs.map((r) => [r.jobId, r.outcome, r.reason]).sort(), [["91", "failed", "canceled"], ["92", "failed", "canceled"]]);
    assert.equal((reason as { kind?: string } | undefined)?.kind, "canceled");
  });

  it("fails a handler past its time limit, counted from its start", async () => {
    // One slot: the second job waits 1.2 s for it, longer than its 1 s
    // limit, and still succeeds in its 0.2 s run.
    const h = new Harness({ concurrency: 1 }).handle("t", async (job, { signal }) => {
      const ms = (job.payload as { ms: number }).ms;
      await Promise.race([new Promise((r) => setTimeout(r, ms)), untilAborted(signal)]);
      return "ok";
    });
    h.start();
    await h.deliver(
      { jobId: "11", token: "501", name: "t", payload: `{"ms":1200}`, timeoutSeconds: 5 },
      { jobId: "12", token: "502", name: "t", payload: `{"ms":200}`, timeoutSeconds: 1 },
      { jobId: "13", token: "503", name: "t", payload: `{"ms":5000}`, timeoutSeconds: 1 },
    );
    const rs = await h.waitOutcomes(3);
    await h.stop();
    const by = new Map(rs.map((x) => [x.jobId, x]));
    assert.equal(by.get("11")!.outcome, "completed");
    assert.equal(by.get("12")!.outcome, "completed");
    assert.deepEqual([by.get("13")!.outcome, by.get("13")!.reason, by.get("13")!.error], ["failed", "timeout", "timed out after 1s"]);
  });

  it("reports errors, permanent errors and results", async () => {
    const h = new Harness()
      .handle("err", () => {
        throw new Error("boom");
      })
      .handle("perm", async () => {
        throw new PermanentError("no use retrying");
      })
      .handle("bigint", () => 1n)
      .start();
    await h.deliver({ jobId: "21", token: "601", name: "err" }, { jobId: "22", token: "602", name: "perm" }, { jobId: "23", token: "603", name: "bigint" }, { jobId: "24", token: "604", name: "nobody" });
    const rs = await h.waitOutcomes(4);
    await h.stop();
    const by = new Map(rs.map((x) => [x.jobId, [x.outcome, x.reason, x.error]]));
    assert.deepEqual(by.get("21"), ["failed", "error", "boom"]);
    assert.deepEqual(by.get("22"), ["failed", "permanent", "no use retrying"]);
    assert.equal(by.get("23")![1], "permanent");
    assert.deepEqual(by.get("24"), ["failed", "permanent", 'no handler for job type "nobody"']);
  });

  it("sends progress at most once a second per attempt, the latest winning, ahead of the result", async () => {
    const h = new Harness().handle("p", async (job) => {
      const end = Date.now() + 2300;
      let pct = 0;
      while (Date.now() < end) {
        job.progress(Math.min(pct++, 99), `step\u0007 ${pct}`);
        await new Promise((r) => setTimeout(r, 5));
      }
      job.progress(99, "last");
      return "done";
    });
    h.start();
    await h.deliver({ jobId: "31", token: "701", name: "p" });
    await h.waitOutcomes(1);
    await h.stop();
    const rs = await h.results();
    const progress = rs.filter((x) => x.outcome === "progress");
    assert.equal(rs.at(-1)!.outcome, "completed");
    assert.ok(progress.length >= 2 && progress.length <= 4, `${progress.length} progress reports in 2.3 s`);
    for (let i = 1; i < progress.length - 1; i++) {
      // Stream ids are Redis's clock: a send may be late on a loaded
      // machine, so a gap may look shorter than the second between two
      // queued reports (unthrottled, they would be 5 ms apart). The last
      // report goes with the result, unthrottled.
      assert.ok(progress[i]!.at - progress[i - 1]!.at >= 500, `reports ${i - 1} and ${i} ${progress[i]!.at - progress[i - 1]!.at} ms apart`);
    }
    assert.deepEqual([progress.at(-1)!.progress, progress.at(-1)!.message], [99, "last"]);
    assert.ok(!progress.some((p) => p.message?.includes("\u0007")), "control characters are dropped");
  });

  it("counts a progress report's interval from when Redis took the last one", async () => {
    // Writes paused for 800 ms as the first report goes out (a busy Redis,
    // a loaded machine): the next one must still come a second after
    // Redis took the first, not a second after it was queued.
    let paused!: () => void;
    const go = new Promise<void>((r) => (paused = r));
    let startedAt = 0;
    const h = new Harness().handle("p", async (job) => {
      startedAt = Date.now();
      await go;
      const end = Date.now() + 2000;
      let pct = 0;
      while (Date.now() < end) {
        job.progress(Math.min(pct++, 99));
        await new Promise((r) => setTimeout(r, 5));
      }
      return "done";
    });
    h.start();
    await h.deliver({ jobId: "32", token: "702", name: "p" });
    await waitFor("the handler to start", async () => (startedAt ? true : undefined));
    await shared.rdb.sendCommand(["CLIENT", "PAUSE", "800", "WRITE"]);
    paused();
    await h.waitOutcomes(1);
    await h.stop();
    const progress = (await h.results()).filter((x) => x.outcome === "progress");
    assert.ok(progress.length >= 2, `${progress.length} progress reports`);
    for (let i = 1; i < progress.length - 1; i++) {
      assert.ok(progress[i]!.at - progress[i - 1]!.at >= 900, `reports ${i - 1} and ${i} ${progress[i]!.at - progress[i - 1]!.at} ms apart`);
    }
  });

  it("sends job.log's lines with a lines-only report while it runs and the rest with the result, bounded", async () => {
    const h = new Harness().handle("logs", async (job) => {
      job.log.info("start", { to: "ada lovelace", n: 2, ok: true });
      await new Promise((r) => setTimeout(r, 1300));
      for (let i = 0; i < 70; i++) job.log.debug("x".repeat(1000));
      job.log.error("last");
      return null;
    });
    h.handle("quiet", async () => "ok");
    h.start();
    await h.deliver({ jobId: "41", token: "801", name: "logs" });
    await h.waitOutcomes(1);
    await h.deliver({ jobId: "42", token: "802", name: "quiet" });
    await h.waitOutcomes(2);
    await h.stop();
    const rs = await h.results();
    const mine = rs.filter((x) => x.token === "801");
    const logsOf = (x: Sent) => (x.f.has("logs") ? (JSON.parse(x.f.get("logs")!) as { lines: { level: string; message: string }[]; dropped?: number }) : undefined);
    const reports = mine.filter((x) => x.outcome === "progress");
    assert.equal(reports.length, 1, JSON.stringify(mine.map((x) => x.outcome)));
    assert.equal(reports[0]!.progress, undefined); // 0: lines only
    assert.deepEqual(logsOf(reports[0]!)!.lines.map((l) => [l.level, l.message]), [["INFO", 'start to="ada lovelace" n=2 ok=true']]);
    const last = logsOf(mine.at(-1)!)!;
    const size = last.lines.reduce((n, l) => n + Buffer.byteLength(l.message) + 32, 0);
    assert.ok(size <= 64 << 10 && (last.dropped ?? 0) > 0 && (last.dropped ?? 0) + last.lines.length === 71, `${last.lines.length} lines, ${size} bytes, ${last.dropped} dropped`);
    assert.deepEqual([last.lines.at(-1)!.level, last.lines.at(-1)!.message], ["ERROR", "last"]);
    assert.equal(logsOf(rs.find((x) => x.token === "802")!), undefined);
  });

  it("drains on stop: hands back what has not started, aborts the rest after the grace period", async () => {
    const started = gate();
    const h = new Harness({ concurrency: 1, shutdownGraceMs: 300 }).handle("s", async (job, { signal }) => {
      started.open();
      await untilAborted(signal);
    });
    h.start();
    await h.deliver({ jobId: "41", token: "801", name: "s" }, { jobId: "42", token: "802", name: "s" });
    await started.wait;
    // 42 was popped and waits for the one slot; 43 stays on the list.
    await waitFor("the waiting lease in a heartbeat", async () =>
      (await h.heartbeats()).some((x) => x.text.includes(`"lease_token":802,"waiting":true`)),
    );
    await h.deliver({ jobId: "43", token: "803", name: "s" });
    const t0 = Date.now();
    await h.stop();
    assert.ok(Date.now() - t0 >= 300, "the running handler gets the grace period");
    const by = new Map((await h.outcomes()).map((x) => [x.jobId, [x.outcome, x.reason]]));
    assert.deepEqual(by.get("41"), ["released", "shutdown"]);
    assert.deepEqual(by.get("42"), ["released", "shutdown"]);
    assert.deepEqual(by.get("43"), ["released", "shutdown"]);
    const hbs = (await h.heartbeats()).map((x) => x.hb);
    const firstDraining = hbs.findIndex((x) => x.draining === true);
    assert.ok(firstDraining >= 0);
    assert.equal(hbs.at(-1)!.stopped, true);
    assert.ok(hbs.slice(0, -1).every((x) => x.stopped === undefined));
    assert.equal(await rdb.sendCommand(["LLEN", `${h.prefix}dts:worker:${h.id}:jobs`]), 0);
  });

  it("lets handlers finish within the grace period", async () => {
    const started = gate();
    const h = new Harness({ shutdownGraceMs: 5000 }).handle("s", async () => {
      started.open();
      await new Promise((r) => setTimeout(r, 300));
      return "finished";
    });
    h.start();
    await h.deliver({ jobId: "51", token: "901", name: "s" });
    await started.wait;
    await h.stop();
    const [r] = await h.outcomes();
    assert.equal(r!.outcome, "completed");
  });

  it("needs no Redis command beyond the worker ACL of docs/security.md", async () => {
    // The Harness is made before any await: its number (and so its id
    // and prefix) is the next one while no other test makes one.
    const n = seq + 1;
    const user = `dts-worker-${n}`;
    const p = `t${n}:`;
    const started = gate();
    const h = new Harness({ redisUrl: `redis://${user}:worker-pw@127.0.0.1:${server.port}` })
      .handle("a", async (job, { signal }) => {
        if (job.id === "71") {
          started.open();
          await untilAborted(signal);
        }
        job.progress(10, "ten");
        return "ok";
      });
    await rdb.sendCommand([
      "ACL", "SETUSER", user, "on", ">worker-pw", "resetkeys", "resetchannels",
      `~${p}dts:worker:worker-${n}:jobs`, `~${p}dts:worker:worker-${n}:control`, `~${p}dts:heartbeats`, `~${p}dts:results`,
      "-@all", "+ping", "+hello", "+auth", "+select", "+lmpop", "+blmpop", "+xadd",
    ]);
    await rdb.sendCommand(["ACL", "LOG", "RESET"]);
    assert.equal(h.prefix, p);
    h.start();
    await h.deliver({ jobId: "71", token: "1071", name: "a" }, { jobId: "72", token: "1072", name: "a" });
    await started.wait;
    await h.cancel("71", "1071");
    await h.waitOutcomes(2);
    await h.deliver({ jobId: "73", token: "1073", name: "a" });
    await h.stop();
    assert.equal((await h.outcomes()).length, 3);
    const log = (await rdb.sendCommand(["ACL", "LOG"])) as unknown[];
    assert.deepEqual(log, [], "Redis denied commands: " + JSON.stringify(log));
  });

  it("leaves nothing behind that keeps the process alive once run() has resolved", async () => {
    // A program that stops its worker and returns: node must exit at once,
    // not when the 30 s grace period's timer would have fired.
    const index = new URL("../dist/index.js", import.meta.url).href;
    const t0 = Date.now();
    const program = `
      import { Worker, discardLogger } from ${JSON.stringify(index)};
      const w = new Worker({ id: "exit-${seq}", redisUrl: ${JSON.stringify(server.url)}, redisPrefix: "exit:", logger: discardLogger });
      w.handle("x", () => 1);
      const running = w.run();
      setTimeout(() => w.stop(), 300);
      await running;
      console.log("resolved " + Date.now());`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", program], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number>((resolve) => child.once("exit", () => resolve(Date.now())));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    const at = await exited;
    clearTimeout(timer);
    const resolvedAt = Number(/resolved (\d+)/.exec(out)?.[1]);
    assert.ok(resolvedAt > 0, `run() did not resolve in ${at - t0} ms: ${out}`);
    // Well under the grace period's 30 s, with room for a loaded machine.
    assert.ok(at - resolvedAt < 10_000, `node exited ${at - resolvedAt} ms after run() resolved`);
  });

  it("stops while Redis cannot be reached", async () => {
    const down = new RedisServer();
    await down.start();
    await down.stop(); // a port nothing listens on
    try {
      const h = new Harness({}, rdb, down).handle("x", () => null).start();
      await new Promise((r) => setTimeout(r, 300));
      const t0 = Date.now();
      await h.stop();
      assert.ok(Date.now() - t0 < 3000, `run() took ${Date.now() - t0} ms to end after stop()`);
    } finally {
      await down.close();
    }
  });

  it("reconnects when a connection to Redis stops answering", async () => {
    const proxy = new BlackholeProxy(server.port);
    await proxy.start();
    try {
      const h = new Harness({ redisUrl: proxy.url }).handle("r", (job) => job.id).start();
      await h.deliver({ jobId: "91", token: "1091", name: "r" });
      await h.waitOutcomes(1);
      const before = (await h.heartbeats()).length;
      proxy.blackhole(); // the worker's connections go silent; new ones work
      await waitFor("heartbeats on a new connection", async () => (await h.heartbeats()).length > before + 3, 15_000);
      await h.deliver({ jobId: "92", token: "1092", name: "r" });
      await waitFor("the result of a job delivered after the reconnect", async () => (await h.outcomes()).some((r) => r.jobId === "92"), 15_000);
      await h.stop();
      // 91's result may be sent twice: its XADD was applied, but the answer
      // was swallowed. The coordinator takes the first and drops the second
      // as stale; neither is a second run.
      const outcomes = await h.outcomes();
      assert.deepEqual([...new Set(outcomes.map((r) => `${r.jobId}/${r.token}/${r.outcome}`))], ["91/1091/completed", "92/1092/completed"]);
    } finally {
      await proxy.close();
    }
  });

  it("carries on after a Redis restart", async () => {
    // Its own server: the restart must not disturb the other tests. Every
    // wait is bounded, so a restart gone wrong fails naming its step.
    const own = new RedisServer();
    await own.start();
    const c = await own.client();
    try {
      const h = new Harness({}, c, own).handle("r", (job) => job.id).start();
      await within(5_000, "the delivery before the restart", h.deliver({ jobId: "61", token: "1061", name: "r" }));
      await h.waitOutcomes(1);
      await within(5_000, "redis-server to stop", own.stop());
      await new Promise((r) => setTimeout(r, 300));
      await own.start();
      await within(10_000, "the delivery after the restart", h.deliver({ jobId: "62", token: "1062", name: "r" }));
      const [r] = await h.waitOutcomes(1, "the result of a job delivered after the restart");
      assert.deepEqual([r!.jobId, r!.outcome, r!.result], ["62", "completed", `"62"`]);
      await waitFor("a heartbeat after the restart", async () => (await h.heartbeats()).length > 0);
      await within(10_000, "the worker to stop", h.stop());
    } finally {
      c.destroy();
      await own.close();
    }
  });
});

describe("wire decoding", () => {
  it("takes the top-level lease_token, not one in the payload", () => {
    const d = decodeDelivery(
      `{"job_id":1,"name":"n","payload":{"lease_token":5,"s":"\\"lease_token\\":6 } ]"},"attempt":2,"max_retries":3,"lease_token":9223372036854775000,"created_at":"x"}`,
    );
    assert.equal(d.token, "9223372036854775000");
    assert.equal(d.jobId, "1");
    assert.equal(d.attempt, 2);
    assert.deepEqual(d.payload, { lease_token: 5, s: '"lease_token":6 } ]' });
  });

  it("refuses deliveries without a job, token or name, or with a token that is not an integer", () => {
    assert.throws(() => decodeDelivery(`{"job_id":1,"name":"n","payload":null}`));
    assert.throws(() => decodeDelivery(`{"job_id":1,"lease_token":1.5,"name":"n"}`));
    assert.throws(() => decodeDelivery(`{"job_id":1,"lease_token":99999999999999999999,"name":"n"}`));
    assert.throws(() => decodeDelivery(`{"job_id":1,"lease_token":2,"name":""}`));
    assert.throws(() => decodeDelivery(`[1]`));
    assert.throws(() => decodeDelivery(`{"job_id":1,"lease_token":2,"name":"n"} x`));
  });

  it("checks messages against docs/protocol's schemas", () => {
    checkMessage("control", `{"op":"cancel","job_id":1,"lease_token":0}`);
    assert.throws(() => checkMessage("control", `{"op":"pause","job_id":1,"lease_token":0}`), /not in/);
    assert.throws(() => checkMessage("result", `{"job_id":1,"lease_token":2,"worker_id":"w","attempt":1,"outcome":"done","started_at":"x","finished_at":"2026-01-01T00:00:00Z"}`), /outcome.*started_at/s);
    assert.throws(() => checkMessage("heartbeat", `{"worker_id":"w","job_types":[],"concurrency":1,"in_flight":[{"job_id":1}],"sent_at":"2026-01-01T00:00:00Z"}`), /lease_token is missing/);
  });

  it("cleans progress messages", () => {
    assert.equal(progressMessage("a\nb\u0085c\ud800d"), "abcd");
    assert.equal([...progressMessage("é".repeat(300))].length, 200);
  });
});
