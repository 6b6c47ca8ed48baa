// The conformance worker: the fixed set of handlers the conformance suite
// (e2e/conformance_test.go) runs every SDK's worker with, configured only by
// environment variables: WORKER_ID and REDIS_URL (required), REDIS_PREFIX,
// WORKER_CONCURRENCY (4), HEARTBEAT_INTERVAL (1s), SHUTDOWN_GRACE (5s), in
// Go's duration syntax, and WORKER_CREDENTIAL. Logs go to stderr; it exits 0
// after a clean SIGTERM drain.
import { PermanentError, RawJSON, Worker, type HandlerContext, type Job } from "../index.js";

function main(): Promise<void> {
  const env = process.env;
  const id = required("WORKER_ID");
  const worker = new Worker({
    id,
    redisUrl: required("REDIS_URL"),
    redisPrefix: env.REDIS_PREFIX ?? "",
    concurrency: env.WORKER_CONCURRENCY ? integer("WORKER_CONCURRENCY") : 4,
    heartbeatIntervalMs: env.HEARTBEAT_INTERVAL ? parseDuration("HEARTBEAT_INTERVAL") : 1000,
    shutdownGraceMs: env.SHUTDOWN_GRACE ? parseDuration("SHUTDOWN_GRACE") : 5000,
    ...(env.WORKER_CREDENTIAL ? { credential: env.WORKER_CREDENTIAL } : {}),
  });

  worker.handle("conf.echo", (job) => new RawJSON(job.payloadText));

  worker.handle("conf.fail", (job) => {
    const n = (job.payload as { succeed_on?: unknown } | null)?.succeed_on;
    if (typeof n !== "number" || job.attempt < n) throw new Error(`failed on attempt ${job.attempt}`);
    return { attempt: job.attempt };
  });

  worker.handle("conf.permanent", () => {
    throw new PermanentError("permanent failure");
  });

  worker.handle("conf.sleep", async (job, { signal }) => {
    const ms = msOf(job, 0);
    await sleep(ms, signal);
    return { slept_ms: ms };
  });

  worker.handle("conf.stubborn", async (job) => {
    const ms = msOf(job, 0);
    await sleep(ms); // ignores the abort signal on purpose
    return { slept_ms: ms };
  });

  worker.handle("conf.progress", async (job, { signal }: HandlerContext) => {
    job.progress(50, "halfway");
    await sleep(msOf(job, 1500), signal);
    return { done: true };
  });

  worker.handle("conf.log", (job) => {
    const lines = (job.payload as { lines?: unknown } | null)?.lines;
    const list = Array.isArray(lines) ? lines.map(String) : [];
    list.forEach((line, i) => job.log.info(line, { n: i + 1 }));
    return { logged: list.length };
  });

  worker.handle("conf.large", (job) => {
    const size = (job.payload as { size?: unknown } | null)?.size;
    return { data: "x".repeat(typeof size === "number" && size > 0 ? size : 0) };
  });

  worker.handle("conf.text", (job) => {
    const text = (job.payload as { text?: unknown } | null)?.text;
    const s = typeof text === "string" ? text : "";
    return { text: s, runes: [...s].length };
  });

  return worker.run();
}

function msOf(job: Job, def: number): number {
  const ms = (job.payload as { ms?: unknown } | null)?.ms;
  return typeof ms === "number" && ms >= 0 ? ms : def;
}

// sleep waits ms, or rejects with the signal's reason once it is aborted.
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function required(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is required`);
  return v;
}

function integer(name: string): number {
  const v = Number(process.env[name]);
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name}: not a positive integer`);
  return v;
}

const units: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, "μs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** parseDuration reads a Go duration ("1s", "200ms", "1m30s") as milliseconds. */
function parseDuration(name: string): number {
  const v = process.env[name]!;
  const re = /([0-9]*\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(v); m; m = re.exec(v)) {
    total += Number(m[1]) * units[m[2]!]!;
    end = re.lastIndex;
  }
  if (end === 0 || end !== v.length) throw new Error(`${name}: ${JSON.stringify(v)} is not a duration like 1s or 200ms`);
  return total;
}

main().then(
  () => process.exit(0), // handlers that ignored their abort signal are left behind
  (e: unknown) => {
    process.stderr.write(`conformance_worker: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  },
);
