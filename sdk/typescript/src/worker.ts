import { hostname } from "node:os";
import { createClient } from "redis";

import { encodeResult, field, int64Field, rawFields } from "./json.js";
import { type JobLog, LogBuffer, type Logs } from "./joblog.js";
import { type Logger, stderrLogger } from "./log.js";

/** The SDK's version, sent in heartbeats for operators. */
export const VERSION = "ts-0.1.0";

/** The worker protocol version this SDK speaks (docs/protocol.md), announced in every heartbeat. */
export const PROTOCOL_VERSION = 1;

// Defaults of WorkerOptions.
export const DEFAULT_CONCURRENCY = 8;
export const DEFAULT_PREFETCH = 32;
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 1000;
export const DEFAULT_SHUTDOWN_GRACE_MS = 30_000;

// Protocol constants (docs/protocol.md).
const receiveBlockMs = 500; // how long one blocking pop waits: at most this long from stop() to the drain
const progressIntervalMs = 1000; // the least time between two progress reports of an attempt
const maxProgressMessage = 200; // characters (code points)
const remembered = 10_000; // lease tokens remembered beyond those held
const redisTimeoutMs = 5000; // one heartbeat, one batch of results
const cancelWaitMs = 5000; // for handlers to return once the grace period has ended
const flushMinMs = 1000; // the least time results get after the last attempt ended
const stopTimeoutMs = 1000; // the final heartbeat, saying stopped
const heartbeatStreamLen = "10000";
const host = hostname();

/** WorkerOptions configures a Worker; fields left out take the defaults in their comments. */
export interface WorkerOptions {
  /** Names the worker; unique in the fleet, at most 200 characters. Default `<hostname>-<pid>`. */
  id?: string | undefined;
  /** The Redis URL (redis:// or rediss://). Required. */
  redisUrl: string;
  /** Namespaces every Redis key; must match the coordinator's. Default "". */
  redisPrefix?: string | undefined;
  /** How many handlers run at once. Default 8. */
  concurrency?: number | undefined;
  /**
   * How many jobs beyond concurrency the worker holds leased, each waiting
   * for a free slot, so that a freed slot starts its next job without a
   * round trip through the coordinator: with none, a lone worker of 8
   * slots runs 10 ms jobs at a quarter of the rate it reaches with 32.
   * Set 0 when jobs run for minutes (a job waiting behind them is not
   * taken over by a worker started later). Waiting jobs are handed back
   * unrun at shutdown. Default 32, as the worker binary's WORKER_PREFETCH.
   */
  prefetch?: number | undefined;
  /**
   * The queues the worker serves, with weights 0..1000: when all have due
   * jobs, each gets a share of the slots in proportion to its weight (0:
   * only slots the others leave). Default: every queue, by priority alone.
   */
  queues?: QueueWeight[] | undefined;
  /** How often the worker heartbeats, in ms; must match the coordinator's setting. Default 1000. */
  heartbeatIntervalMs?: number | undefined;
  /** How long running handlers may finish after stop() (or SIGTERM) before they are aborted and handed back, in ms. Default 30000. */
  shutdownGraceMs?: number | undefined;
  /** Sent with every heartbeat for the coordinator to check (WORKER_CREDENTIAL). Default none. */
  credential?: string | undefined;
  /** Where log lines go. Default: logfmt lines on stderr, info and above. */
  logger?: Logger | undefined;
  /** Whether run() stops the worker on SIGTERM and SIGINT. Default true. */
  handleSignals?: boolean | undefined;
}

/** One queue a worker serves and its weight (WorkerOptions.queues). */
export interface QueueWeight {
  name: string;
  weight: number;
}

/** Job is one attempt at one job, as a handler receives it. */
export interface Job {
  /** The job id as the API shows it (a decimal string: ids are 64-bit). */
  readonly id: string;
  /** The job type. */
  readonly name: string;
  /** The queue it was submitted to. */
  readonly queue: string;
  /** The payload, parsed. Integers beyond 2^53 lose precision here; payloadText has them exactly. */
  readonly payload: unknown;
  /** The payload exactly as submitted (a JSON text). */
  readonly payloadText: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  /** Retries allowed after the first attempt. */
  readonly maxRetries: number;
  /** The attempt's time limit in seconds from its handler's start, 0 for none. */
  readonly timeoutSeconds: number;
  /** The worker running the attempt. */
  readonly workerId: string;
  /** When the job was submitted (RFC 3339 text). */
  readonly createdAt: string;
  /**
   * progress reports how far the attempt has come: pct from 0 to 100 and a
   * short message (control characters dropped, cut to 200 characters). It
   * never blocks: at most one report a second per attempt is sent (the
   * latest within the second wins), ahead of the attempt's result. It
   * throws a RangeError for a pct out of range and does nothing once the
   * attempt is aborted.
   */
  progress(pct: number, message?: string): void;
  /**
   * log keeps what the handler logs with it with the job (GET
   * /jobs/{id}/logs, dtsctl jobs logs): each line with its time, level,
   * message and attrs (as key=value), the newest 64 KiB of the attempt
   * (older lines are dropped and counted). Lines travel with the attempt's
   * progress reports (at most one a second, none in its first second) and
   * its result; lines logged after the handler returned are dropped. They
   * also go to the worker's logger at debug level.
   */
  readonly log: JobLog;
}

/** What a handler gets beside its job. */
export interface HandlerContext {
  /**
   * Aborted when the job is canceled, its time limit passes, a newer lease
   * of it arrives, or the worker's shutdown grace ends. signal.reason is an
   * AttemptAborted saying which.
   */
  signal: AbortSignal;
}

/**
 * Handler runs one attempt. What it returns (any JSON-encodable value, a
 * RawJSON, or undefined/null for none) is stored as the result. A throw
 * fails the attempt, retried while retries remain; throw a PermanentError
 * to skip the remaining retries.
 */
export type Handler = (job: Job, ctx: HandlerContext) => unknown;

/** PermanentError fails a job at once, without further retries. */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/** Why an attempt's signal was aborted. */
export type AbortKind = "canceled" | "timeout" | "shutdown" | "superseded";

/** AttemptAborted is the reason of an aborted attempt's signal. */
export class AttemptAborted extends Error {
  readonly kind: AbortKind;
  constructor(kind: AbortKind, message: string) {
    super(message);
    this.name = "AttemptAborted";
    this.kind = kind;
  }
}

// Delivery is a leased job as the coordinator sends it; ids and tokens are
// decimal strings.
interface Delivery {
  jobId: string;
  token: string;
  name: string;
  queue: string;
  payloadText: string;
  payload: unknown;
  attempt: number;
  maxRetries: number;
  timeoutSeconds: number;
  createdAt: string;
}

/** decodeDelivery decodes one delivery (JSON, codec 0), keeping ids and tokens exact. */
export function decodeDelivery(text: string): Delivery {
  const f = rawFields(text);
  const jobId = int64Field(f, "job_id");
  const token = int64Field(f, "lease_token");
  const name = field(f, "name");
  if (!positiveInt(jobId) || !positiveInt(token) || typeof name !== "string" || name === "") {
    throw new SyntaxError("missing job_id, lease_token or name");
  }
  const payloadText = f.get("payload") ?? "null";
  return {
    jobId,
    token,
    name,
    queue: str(field(f, "queue")),
    payloadText,
    payload: JSON.parse(payloadText),
    attempt: num(field(f, "attempt")),
    maxRetries: num(field(f, "max_retries")),
    timeoutSeconds: num(field(f, "timeout_seconds")),
    createdAt: str(field(f, "created_at")),
  };
}

interface Control {
  op: string;
  jobId: string;
  token: string; // "0": the job's newest lease here
}

function decodeControl(text: string): Control {
  const f = rawFields(text);
  return { op: str(field(f, "op")), jobId: int64Field(f, "job_id"), token: int64Field(f, "lease_token") };
}

// positiveInt says whether the decimal text of an int64 is above 0.
const positiveInt = (s: string): boolean => s !== "0" && s[0] !== "-";

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

// Result is one message for the results stream.
interface Result {
  jobId: string;
  token: string;
  attempt: number;
  outcome: "completed" | "failed" | "released" | "progress";
  result?: string; // JSON text
  error?: string;
  reason?: string;
  progress?: number;
  message?: string;
  logs?: Logs | undefined;
  startedAt: Date;
  finishedAt?: Date;
}

// encodeResultMessage writes r as the protocol's Result JSON, with the id
// and token as exact integers.
function encodeResultMessage(r: Result, workerIdJSON: string): string {
  let s = `{"job_id":${r.jobId},"lease_token":${r.token},"worker_id":${workerIdJSON},"attempt":${r.attempt},"outcome":"${r.outcome}"`;
  if (r.result !== undefined) s += `,"result":${r.result}`;
  if (r.error) s += `,"error":${JSON.stringify(r.error)}`;
  if (r.reason) s += `,"reason":${JSON.stringify(r.reason)}`;
  if (r.progress) s += `,"progress":${r.progress}`;
  if (r.message) s += `,"message":${JSON.stringify(r.message)}`;
  if (r.logs) s += `,"logs":${JSON.stringify(r.logs)}`;
  // A progress report ends nothing: its finished_at is the zero time, as the Go worker's.
  const finished = r.outcome === "progress" ? zeroTime : (r.finishedAt ?? r.startedAt).toISOString();
  return s + `,"started_at":"${r.startedAt.toISOString()}","finished_at":"${finished}"}`;
}

const zeroTime = "0001-01-01T00:00:00Z";

/** progressMessage drops control characters and lone surrogates and keeps at most 200 code points. */
export function progressMessage(msg: string): string {
  let out = "";
  let n = 0;
  for (const ch of msg) {
    if (n === maxProgressMessage) break;
    const c = ch.codePointAt(0)!;
    if (c < 0x20 || (c >= 0x7f && c < 0xa0) || (c >= 0xd800 && c < 0xe000)) continue;
    out += ch;
    n++;
  }
  return out;
}

interface Attempt {
  jobId: string;
  // Why the attempt was aborted, once it was. The handler's AbortController
  // is made only when it reads its signal: most never do.
  aborted?: AttemptAborted | undefined;
  controller?: AbortController | undefined;
  onAbort?: (() => void) | undefined; // set while it waits for a slot
  started: boolean;
  startedAt: number; // Date.now() at the handler's start
  progress?: Result | undefined; // the latest report not yet queued
  lastProgress: number; // when the last report was queued, then when Redis took it
  progressSending?: boolean; // a report is queued and Redis has not taken it yet
  progressTimer?: NodeJS.Timeout | undefined;
  // progress is not the handler's report but one carrying its log's lines,
  // repeating the latest report sent (lastPct, lastMsg); logs is the
  // attempt's log once the handler used job.log.
  logsOnly?: boolean;
  lastPct?: number;
  lastMsg?: string;
  logs?: LogBuffer | undefined;
}

// abort aborts the attempt for reason, unless it was aborted already (the
// first reason stands, as an AbortSignal's).
function abort(a: Attempt, reason: AttemptAborted): void {
  if (a.aborted) return;
  a.aborted = reason;
  a.controller?.abort(reason);
  a.onAbort?.();
}

// signalOf is the attempt's AbortSignal, made on first use.
function signalOf(a: Attempt): AbortSignal {
  if (!a.controller) {
    a.controller = new AbortController();
    if (a.aborted) a.controller.abort(a.aborted);
  }
  return a.controller.signal;
}

// AttemptContext is the HandlerContext of one attempt.
class AttemptContext implements HandlerContext {
  constructor(private readonly a: Attempt) {}
  get signal(): AbortSignal {
    return signalOf(this.a);
  }
}

// What a Job calls back into its worker for.
interface JobHooks {
  progress(d: Delivery, pct: number, message: string): void;
  logsWaiting(d: Delivery): void;
  mirror(d: Delivery, level: string, message: string): void;
}

// AttemptJob is the Job a handler receives.
class AttemptJob implements Job {
  readonly id: string;
  readonly name: string;
  readonly queue: string;
  readonly payload: unknown;
  readonly payloadText: string;
  readonly attempt: number;
  readonly maxRetries: number;
  readonly timeoutSeconds: number;
  readonly workerId: string;
  readonly createdAt: string;
  readonly #d: Delivery;
  readonly #a: Attempt;
  readonly #hooks: JobHooks;

  constructor(d: Delivery, a: Attempt, workerId: string, hooks: JobHooks) {
    this.id = d.jobId;
    this.name = d.name;
    this.queue = d.queue;
    this.payload = d.payload;
    this.payloadText = d.payloadText;
    this.attempt = d.attempt;
    this.maxRetries = d.maxRetries;
    this.timeoutSeconds = d.timeoutSeconds;
    this.workerId = workerId;
    this.createdAt = d.createdAt;
    this.#d = d;
    this.#a = a;
    this.#hooks = hooks;
  }

  progress(pct: number, message = ""): void {
    if (!(pct >= 0 && pct <= 100)) throw new RangeError(`progress ${pct}: must be between 0 and 100`);
    if (this.#a.aborted) return;
    this.#hooks.progress(this.#d, Math.round(pct), progressMessage(message));
  }

  get log(): JobLog {
    const a = this.#a;
    if (!a.logs) {
      const d = this.#d;
      const hooks = this.#hooks;
      a.logs = new LogBuffer(
        () => hooks.logsWaiting(d),
        (level, message) => hooks.mirror(d, level, message),
      );
    }
    return a.logs;
  }
}

// TokenSet holds the last n lease tokens added.
class TokenSet {
  private readonly has = new Set<string>();
  private readonly ring: string[] = [];
  private next = 0;
  constructor(private readonly n: number) {}
  contains(t: string): boolean {
    return this.has.has(t);
  }
  add(t: string): void {
    if (this.ring.length < this.n) this.ring.push(t);
    else {
      this.has.delete(this.ring[this.next]!);
      this.ring[this.next] = t;
      this.next = (this.next + 1) % this.n;
    }
    this.has.add(t);
  }
}

// Slots hands out the concurrency slots in the order they were asked for
// (delivery order).
class Slots {
  private readonly waiting: Array<() => void> = [];
  constructor(private free: number) {}
  /** take takes a free slot if one is free and nobody waits for one. */
  take(): boolean {
    if (this.free > 0 && this.waiting.length === 0) {
      this.free--;
      return true;
    }
    return false;
  }
  /** wait queues grant, called once a slot is its. */
  wait(grant: () => void): void {
    this.waiting.push(grant);
  }
  /** withdraw takes grant out of the queue; false when it was granted already. */
  withdraw(grant: () => void): boolean {
    const i = this.waiting.indexOf(grant);
    if (i < 0) return false;
    this.waiting.splice(i, 1);
    return true;
  }
  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
  }
}

type RedisClient = ReturnType<typeof createClient>;

/**
 * Worker runs handlers for the jobs the coordinator leases to it, over the
 * dts worker protocol (docs/protocol.md): it heartbeats, pops deliveries
 * and cancels from its Redis lists, runs each lease at most once, and
 * reports exactly one outcome per lease on the results stream.
 */
export class Worker {
  readonly id: string;
  private readonly workerIdJSON: string;
  private readonly opts: {
    redisUrl: string;
    redisPrefix: string;
    concurrency: number;
    prefetch: number;
    queues?: QueueWeight[];
    heartbeatIntervalMs: number;
    shutdownGraceMs: number;
    handleSignals: boolean;
    credential?: string;
  };
  private readonly log: Logger;
  private readonly handlers = new Map<string, Handler>();
  private readonly keys: { jobs: string; control: string; results: string; heartbeats: string };

  private rdb?: RedisClient;
  private blocking?: RedisClient;
  private slots: Slots;
  private started = false;
  private stopping = false;
  private draining = false;
  private wakeStop!: () => void;
  private readonly stopped: Promise<void>;

  // Attempts are keyed by lease token, not job id: a job can be leased
  // again while its old attempt still runs here.
  private readonly running = new Map<string, Attempt>();
  private readonly unsent = new Map<string, number>(); // token → its handler's start (0: never ran), of results not yet on the stream
  private toSend: Result[] = [];
  private readonly newest = new Map<string, string>(); // job id → its newest lease here: what heartbeats name
  private readonly seen = new TokenSet(remembered); // tokens delivered lately: a second delivery of one is dropped
  private readonly canceled = new Map<string, string>(); // token → job id, canceled before its delivery arrived
  private active = 0; // attempts not yet reported
  private idleWaiters: Array<() => void> = [];
  private wakeSender?: (() => void) | undefined;

  constructor(options: WorkerOptions) {
    if (!options.redisUrl) throw new Error("WorkerOptions.redisUrl is required");
    const id = options.id || `${hostname()}-${process.pid}`;
    if ([...id].length > 200) throw new Error("WorkerOptions.id is longer than 200 characters");
    const concurrency = options.concurrency ?? DEFAULT_CONCURRENCY;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 100_000) {
      throw new Error(`WorkerOptions.concurrency (${concurrency}) is not within 1..100000`);
    }
    const prefetch = options.prefetch ?? DEFAULT_PREFETCH;
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > 100_000) {
      throw new Error(`WorkerOptions.prefetch (${prefetch}) is not within 0..100000`);
    }
    if (options.queues) checkQueues(options.queues);
    this.id = id;
    this.workerIdJSON = JSON.stringify(id);
    this.opts = {
      redisUrl: options.redisUrl,
      redisPrefix: options.redisPrefix ?? "",
      concurrency,
      prefetch,
      ...(options.queues ? { queues: options.queues.map((q) => ({ name: q.name, weight: q.weight })) } : {}),
      heartbeatIntervalMs: positive(options.heartbeatIntervalMs, DEFAULT_HEARTBEAT_INTERVAL_MS),
      shutdownGraceMs: positive(options.shutdownGraceMs, DEFAULT_SHUTDOWN_GRACE_MS),
      handleSignals: options.handleSignals ?? true,
      ...(options.credential ? { credential: options.credential } : {}),
    };
    this.log = options.logger ?? stderrLogger();
    const p = this.opts.redisPrefix;
    this.keys = {
      jobs: `${p}dts:worker:${id}:jobs`,
      control: `${p}dts:worker:${id}:control`,
      results: `${p}dts:results`,
      heartbeats: `${p}dts:heartbeats`,
    };
    this.slots = new Slots(concurrency);
    this.stopped = new Promise((resolve) => (this.wakeStop = resolve));
  }

  /** handle registers handler for jobs named name ("*": every name without a handler of its own). Call before run(). */
  handle(name: string, handler: Handler): this {
    if (this.started) throw new Error("handle after run");
    this.handlers.set(name, handler);
    return this;
  }

  /** stop begins the drain that SIGTERM begins; run() resolves once it is done. */
  stop(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.wakeStop();
    if (!this.rdb) return;
    // Tell the coordinator at once, not after the receive loop's pop returns.
    this.draining = true;
    this.cancelWaiting();
    void this.heartbeat(false);
  }

  /**
   * run connects to Redis and works until stop() or, unless handleSignals
   * is false, SIGTERM or SIGINT. Then it drains: it stops taking jobs, lets
   * running handlers finish for shutdownGraceMs, aborts and hands back the
   * rest (and any delivered but not started), sends their results, sends a
   * last heartbeat saying stopped, and resolves.
   */
  async run(): Promise<void> {
    if (this.started) throw new Error("run called twice");
    if (this.handlers.size === 0) throw new Error("no handlers registered");
    this.started = true;
    const onSignal = (sig: string) => {
      this.log.info("signal received: draining", { signal: sig });
      this.stop();
    };
    if (this.opts.handleSignals) {
      process.on("SIGTERM", onSignal);
      process.on("SIGINT", onSignal);
    }
    try {
      this.rdb = this.newClient("main");
      this.blocking = this.rdb.duplicate();
      this.blocking.on("error", (e: Error) => this.logRedisError("blocking", e));
      // The clients keep trying while Redis cannot be reached; stop() ends the wait.
      const connected = Promise.all([this.rdb.connect(), this.blocking.connect()]);
      connected.catch(() => {}); // after a stop(), a failure to connect is moot
      await Promise.race([connected, this.stopped]);
      if (!this.rdb.isReady || !this.blocking.isReady) {
        this.log.warn("stopped before Redis could be reached", { worker_id: this.id });
        return;
      }
      const graceStart = { at: 0 };
      this.stopped.then(() => (graceStart.at = Date.now()));
      this.log.info("worker started", { worker_id: this.id, concurrency: this.opts.concurrency, job_types: this.jobTypes() });
      const heartbeats = this.heartbeatLoop();
      const sender = this.sendLoop();
      await this.receiveLoop();
      await this.drain(graceStart.at || Date.now());
      heartbeats.stop();
      await heartbeats.done;
      await sender;
      await this.heartbeat(true, stopTimeoutMs);
      this.log.info("worker stopped", { worker_id: this.id });
    } finally {
      if (this.opts.handleSignals) {
        process.off("SIGTERM", onSignal);
        process.off("SIGINT", onSignal);
      }
      for (const c of [this.blocking, this.rdb]) {
        if (c?.isOpen) c.destroy();
      }
    }
  }

  private newClient(role: string): RedisClient {
    const c = createClient({
      url: this.opts.redisUrl,
      // Fail commands at once while Redis is away instead of queueing
      // them: the loops retry, and a heartbeat queued for a minute says
      // nothing true.
      disableOfflineQueue: true,
      // Only the commands of the worker's ACL (docs/security.md): no
      // CLIENT SETINFO or CLIENT MAINT_NOTIFICATIONS on connect.
      disableClientInfo: true,
      maintNotifications: "disabled",
      socket: { reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 6), 2000) },
    });
    c.on("error", (e: Error) => this.logRedisError(role, e));
    return c;
  }

  private lastRedisLog = 0;
  private logRedisError(role: string, e: Error): void {
    const now = Date.now();
    if (now - this.lastRedisLog < 1000) return; // one line a second while Redis is away
    this.lastRedisLog = now;
    this.log.warn("redis connection error", { connection: role, error: e.message });
  }

  // call sends one command and waits up to ms for its answer. A command
  // unanswered by then means the connection is dead without Redis or the
  // kernel saying so (a partition, a dropped NAT entry): node-redis would
  // wait for ever, so the connection is dropped and opened again, and the
  // command fails. (A delivery popped on a connection dropped so is lost
  // to this worker: its lease runs out and the coordinator retries it.)
  private async call(client: RedisClient, role: string, ms: number, args: string[]): Promise<unknown> {
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(new Error(`redis ${args[0]} unanswered after ${ms} ms`));
        this.reconnect(client, role);
      }, ms);
    });
    try {
      return await Promise.race([client.sendCommand(args), expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  private reconnect(client: RedisClient, role: string): void {
    if (!client.isOpen || this.reconnecting.has(client)) return;
    this.reconnecting.add(client);
    this.log.warn("redis connection stopped answering: reconnecting", { connection: role });
    client.destroy(); // fails the commands waiting on it
    client
      .connect()
      .catch((e: unknown) => this.log.error("redis reconnect failed", { connection: role, error: errText(e) }))
      .finally(() => this.reconnecting.delete(client));
  }

  private readonly reconnecting = new Set<RedisClient>();

  // callAll sends the commands pipelined and waits up to ms for all their
  // answers, as call does for one, with one timer for them all.
  private async callAll(client: RedisClient, role: string, ms: number, cmds: string[][]): Promise<PromiseSettledResult<unknown>[]> {
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => {
        resolve(undefined);
        this.reconnect(client, role);
      }, ms);
    });
    try {
      const all = await Promise.race([Promise.allSettled(cmds.map((c) => client.sendCommand(c))), expired]);
      if (all) return all;
      const reason = new Error(`redis ${cmds[0]?.[0]} unanswered after ${ms} ms`);
      return cmds.map(() => ({ status: "rejected", reason }));
    } finally {
      clearTimeout(timer);
    }
  }

  private jobTypes(): string[] {
    return [...this.handlers.keys()];
  }

  // ---- receive ----

  private async receiveLoop(): Promise<void> {
    const count = String(this.opts.concurrency + this.opts.prefetch);
    while (!this.stopping) {
      let reply: unknown;
      try {
        reply = await this.call(this.blocking!, "blocking", receiveBlockMs + redisTimeoutMs, [
          "BLMPOP", String(receiveBlockMs / 1000), "2", this.keys.control, this.keys.jobs, "RIGHT", "COUNT", count,
        ]);
      } catch (e) {
        if (this.stopping) break;
        this.log.error("receive failed", { error: errText(e) });
        await orTimeout(this.stopped, 200);
        continue;
      }
      // A pop that returned after stop() hands its deliveries back.
      this.handleInbox(reply, this.stopping);
    }
  }

  // handleInbox handles one [key, [message...]] reply of (B)LMPOP.
  private handleInbox(reply: unknown, release: boolean): number {
    if (!Array.isArray(reply) || reply.length !== 2) return 0;
    const [key, values] = reply as [unknown, unknown];
    if (!Array.isArray(values)) return 0;
    for (const v of values) {
      const text = String(v);
      try {
        if (String(key) === this.keys.control) {
          const c = decodeControl(text);
          if (c.op === "cancel") this.cancelJob(c.jobId, c.token);
        } else {
          this.accept(decodeDelivery(text), release);
        }
      } catch (e) {
        this.log.warn("dropped a message that does not decode", { error: errText(e), list: String(key) });
      }
    }
    return values.length;
  }

  // releaseQueued hands back deliveries that arrived but were not started.
  private async releaseQueued(): Promise<void> {
    for (;;) {
      let reply: unknown;
      try {
        reply = await this.call(this.rdb!, "main", redisTimeoutMs, ["LMPOP", "2", this.keys.control, this.keys.jobs, "RIGHT", "COUNT", "1000"]);
      } catch {
        return;
      }
      if (this.handleInbox(reply, true) === 0) return;
    }
  }

  // cancelJob cancels a running attempt, or remembers the cancel for a
  // delivery not received yet (the control list is read before the job
  // list, so a cancel can overtake its job). A cancel without a token
  // names the job's newest lease here.
  private cancelJob(jobId: string, token: string): void {
    if (token === "0") token = this.newest.get(jobId) ?? "0";
    const a = this.running.get(token);
    if (a && a.jobId === jobId) {
      this.log.info("canceling job on request", { job_id: jobId, lease_token: token });
      abort(a, new AttemptAborted("canceled", "job canceled"));
      return;
    }
    if (token === "0" || this.seen.contains(token)) return; // nothing of it here, or that attempt ended
    if (this.canceled.size >= remembered) this.canceled.clear(); // bound it: forget the oldest guesses
    this.canceled.set(token, jobId);
  }

  private cancelWaiting(): void {
    for (const a of this.running.values()) {
      if (!a.started) abort(a, new AttemptAborted("shutdown", "worker shutting down"));
    }
  }

  private cancelAll(): void {
    for (const a of this.running.values()) abort(a, new AttemptAborted("shutdown", "worker shutting down"));
  }

  // accept takes one delivery: it starts it, or reports it handed back if
  // release is set, or failed if it was canceled before it came. The same
  // lease delivered twice runs once. A newer lease of a job whose attempt
  // still runs here aborts that attempt (its lease has ended) and runs.
  private accept(d: Delivery, release: boolean): void {
    const handler = this.handlers.get(d.name) ?? this.handlers.get("*");
    if (this.running.has(d.token) || this.unsent.has(d.token) || this.seen.contains(d.token)) return;
    this.seen.add(d.token);
    // Tokens are random: the lease delivered later is the newer one (the
    // list is FIFO, and a job is leased again only after its lease ended).
    const old = this.newest.get(d.jobId);
    if (old !== undefined) {
      const a = this.running.get(old);
      if (a) {
        this.log.info("a new lease of a running job arrived: aborting the old attempt", {
          job_id: d.jobId, lease_token: d.token, old_lease_token: old,
        });
        abort(a, new AttemptAborted("superseded", "a newer lease of this job arrived"));
      }
    }
    this.newest.set(d.jobId, d.token);
    const canceled = this.canceled.delete(d.token);
    if (canceled || release) {
      const now = new Date();
      const r: Result = canceled
        ? { jobId: d.jobId, token: d.token, attempt: d.attempt, outcome: "failed", reason: "canceled", error: "canceled before it started", startedAt: now }
        : { jobId: d.jobId, token: d.token, attempt: d.attempt, outcome: "released", reason: "shutdown", startedAt: now };
      this.active++;
      this.report(r);
      return;
    }
    const a: Attempt = { jobId: d.jobId, started: false, startedAt: 0, lastProgress: 0 };
    this.running.set(d.token, a);
    this.active++;
    void this.runAttempt(d, a, handler);
  }

  private async runAttempt(d: Delivery, a: Attempt, handler: Handler | undefined): Promise<void> {
    // Slots go in delivery order: a free one is taken here, at once.
    if (!this.slots.take()) {
      const granted = await new Promise<boolean>((resolve) => {
        const grant = () => resolve(true);
        this.slots.wait(grant);
        a.onAbort = () => {
          if (this.slots.withdraw(grant)) resolve(false);
        };
      });
      a.onAbort = undefined;
      if (!granted) {
        this.report(notStarted(d, a.aborted));
        return;
      }
    }
    // A job waiting for a slot never runs if it is aborted first.
    if (a.aborted) {
      this.slots.release();
      this.report(notStarted(d, a.aborted));
      return;
    }
    a.started = true;
    a.startedAt = Date.now();
    // The time limit counts from the handler's start, not the delivery.
    let timer: NodeJS.Timeout | undefined;
    if (d.timeoutSeconds > 0) {
      timer = setTimeout(() => abort(a, new AttemptAborted("timeout", `timed out after ${d.timeoutSeconds}s`)), d.timeoutSeconds * 1000);
    }
    let r: Result;
    try {
      r = await this.execute(d, a, handler);
    } finally {
      if (timer) clearTimeout(timer);
      this.slots.release();
    }
    this.report(r);
  }

  // The Job's calls back into the worker.
  private readonly jobHooks: JobHooks = {
    progress: (d, pct, message) => this.reportProgress(d, pct, message),
    logsWaiting: (d) => this.logsWaiting(d),
    mirror: (d, level, message) => this.log.debug("job log", { job_id: d.jobId, attempt: d.attempt, level, message }),
  };

  private async execute(d: Delivery, a: Attempt, handler: Handler | undefined): Promise<Result> {
    const r: Result = { jobId: d.jobId, token: d.token, attempt: d.attempt, outcome: "completed", startedAt: new Date() };
    if (!handler) {
      r.outcome = "failed";
      r.reason = "permanent";
      r.error = `no handler for job type ${JSON.stringify(d.name)}`;
      r.finishedAt = new Date();
      return r;
    }
    let value: unknown;
    let thrown: unknown;
    let threw = false;
    try {
      value = await handler(new AttemptJob(d, a, this.id, this.jobHooks), new AttemptContext(a));
    } catch (e) {
      threw = true;
      thrown = e;
    }
    r.finishedAt = new Date();
    const cause = a.aborted;
    if (cause) {
      switch (cause.kind) {
        case "shutdown":
          return { ...r, outcome: "released", reason: "shutdown", error: "worker shut down" };
        case "superseded":
          return { ...r, outcome: "released", reason: "superseded", error: cause.message };
        case "canceled":
          return { ...r, outcome: "failed", reason: "canceled", error: "canceled" };
        case "timeout":
          return { ...r, outcome: "failed", reason: "timeout", error: cause.message };
      }
    }
    if (threw) {
      const permanent = thrown instanceof PermanentError;
      this.log.info("attempt did not succeed", { job_id: d.jobId, attempt: d.attempt, name: d.name, error: errText(thrown) });
      return { ...r, outcome: "failed", reason: permanent ? "permanent" : "error", error: errText(thrown) || "error" };
    }
    try {
      const result = encodeResult(value);
      if (result !== undefined) r.result = result;
      return r;
    } catch (e) {
      return { ...r, outcome: "failed", reason: "permanent", error: `result does not encode to JSON: ${errText(e)}` };
    }
  }

  // ---- results ----

  // reportProgress keeps the attempt's latest report and queues it, at most
  // one per progressIntervalMs.
  private reportProgress(d: Delivery, pct: number, message: string): void {
    const a = this.running.get(d.token);
    if (!a || a.jobId !== d.jobId) return;
    a.progress = { jobId: d.jobId, token: d.token, attempt: d.attempt, outcome: "progress", progress: pct, message, startedAt: new Date() };
    a.logsOnly = false;
    this.scheduleProgress(d.token, a, a.lastProgress);
  }

  // logsWaiting schedules a report to carry the lines waiting in the
  // attempt's log: its pending progress report, else one that repeats its
  // latest progress (the coordinator takes a report with lines and neither
  // a percentage nor a message for lines only), not in the attempt's first
  // interval: a short attempt's lines go with its result alone.
  private logsWaiting(d: Delivery): void {
    const a = this.running.get(d.token);
    if (!a || a.jobId !== d.jobId) return;
    if (!a.progress) {
      a.progress = { jobId: d.jobId, token: d.token, attempt: d.attempt, outcome: "progress", progress: a.lastPct ?? 0, message: a.lastMsg ?? "", startedAt: new Date() };
      a.logsOnly = true;
    }
    this.scheduleProgress(d.token, a, Math.max(a.lastProgress, a.startedAt));
  }

  // scheduleProgress queues the attempt's pending report once the interval
  // since `since` has passed. The interval counts from when Redis took the
  // last report (a busy sender or a loaded machine may send it late), so
  // the coordinator too sees at most one a second: while one is unsent,
  // the next waits for it (sendLoop schedules it then).
  private scheduleProgress(token: string, a: Attempt, since: number): void {
    if (a.progressTimer || a.progressSending) return; // queued when the timer fires, the latest then
    const wait = since + progressIntervalMs - Date.now();
    if (wait <= 0) return this.queueProgress(a);
    a.progressTimer = setTimeout(() => {
      a.progressTimer = undefined;
      if (this.running.get(token) === a && a.progress) this.queueProgress(a);
    }, wait);
  }

  private queueProgress(a: Attempt): void {
    const p = a.progress!;
    a.progress = undefined;
    p.logs = a.logs?.take();
    if (a.logsOnly && !p.logs) return; // the lines went with an earlier report
    if (!a.logsOnly) {
      a.lastPct = p.progress ?? 0;
      a.lastMsg = p.message ?? "";
    }
    this.toSend.push(p);
    a.lastProgress = Date.now();
    a.progressSending = true;
    this.wakeSender?.();
  }

  // report moves an attempt from running to unsent and queues its result.
  private report(r: Result): void {
    const a = this.running.get(r.token);
    let started = 0;
    if (a) {
      if (a.progress && a.logsOnly) a.progress = undefined; // its lines go with the result
      if (a.progress) this.queueProgress(a); // the latest report goes ahead of the result
      clearTimeout(a.progressTimer);
      r.logs = a.logs?.take(true);
      started = a.startedAt;
      this.running.delete(r.token);
    }
    this.unsent.set(r.token, started);
    this.toSend.push(r);
    this.wakeSender?.();
    this.active--;
    if (this.active === 0) {
      for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  private idle(): Promise<void> {
    if (this.active === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private senderDeadline = Infinity; // set by the drain: give up sending then
  private senderFinish = false;

  // sendLoop writes queued results to the results stream, retrying each
  // until Redis takes it. While a result is unsent its job stays in the
  // heartbeats' in_flight, so its lease is extended meanwhile. Once the
  // drain finishes it, it sends what is queued and returns.
  private async sendLoop(): Promise<void> {
    for (;;) {
      if (this.toSend.length === 0) {
        if (this.senderFinish) return;
        await new Promise<void>((resolve) => (this.wakeSender = resolve));
        this.wakeSender = undefined;
        // Results that end in the same turn of the event loop (handlers
        // whose timers fired together) go out in one pipelined batch.
        await new Promise<void>((resolve) => setImmediate(resolve));
        continue;
      }
      let batch = this.toSend.length <= 512 ? this.toSend : this.toSend.slice(0, 512);
      this.toSend = this.toSend.length <= 512 ? [] : this.toSend.slice(512);
      for (let attempt = 1; batch.length > 0; attempt++) {
        const sent = await this.callAll(
          this.rdb!,
          "main",
          redisTimeoutMs,
          batch.map((r) => ["XADD", this.keys.results, "*", "r", encodeResultMessage(r, this.workerIdJSON)]),
        );
        const failed: Result[] = [];
        let lastError: unknown;
        sent.forEach((s, i) => {
          const r = batch[i]!;
          if (s.status === "rejected") {
            failed.push(r);
            lastError = s.reason;
          } else if (r.outcome === "progress") {
            const a = this.running.get(r.token);
            if (a && a.jobId === r.jobId) {
              a.progressSending = false;
              a.lastProgress = Date.now();
              if (a.progress) this.scheduleProgress(r.token, a, a.lastProgress);
            }
          } else {
            this.unsent.delete(r.token);
            if (this.newest.get(r.jobId) === r.token) this.newest.delete(r.jobId);
          }
        });
        batch = failed;
        if (batch.length === 0) break;
        if (Date.now() >= this.senderDeadline) {
          this.log.warn("results not sent before the drain ended: the leader recovers their jobs by their leases", {
            count: batch.length + this.toSend.length,
          });
          return;
        }
        this.log.error("send results failed; retrying", { count: batch.length, error: errText(lastError) });
        await sleep(Math.min(attempt * 100, 2000, Math.max(0, this.senderDeadline - Date.now())));
      }
    }
  }

  // ---- heartbeats ----

  private heartbeatLoop(): { stop: () => void; done: Promise<void> } {
    let stop = false;
    let timer: NodeJS.Timeout | undefined;
    let wake: (() => void) | undefined;
    const done = (async () => {
      while (!stop) {
        await this.heartbeat(false);
        if (stop) break;
        await new Promise<void>((resolve) => {
          wake = resolve;
          timer = setTimeout(resolve, this.opts.heartbeatIntervalMs);
        });
      }
    })();
    return {
      stop: () => {
        stop = true;
        clearTimeout(timer);
        wake?.();
      },
      done,
    };
  }

  private async heartbeat(stopped: boolean, timeout = redisTimeoutMs): Promise<void> {
    // Each job's newest lease only; each says whether its handler has
    // started, and how long ago: the job's time limit counts from then.
    const now = Date.now();
    const inFlight: string[] = [];
    for (const [jobId, token] of this.newest) {
      let f = `{"job_id":${jobId},"lease_token":${token}`;
      const a = this.running.get(token);
      const start = a ? a.startedAt : this.unsent.get(token);
      if (start === 0) f += `,"waiting":true`;
      else if (start !== undefined) f += `,"started":true,"run_ms":${Math.max(0, now - start)}`;
      inFlight.push(f + "}");
    }
    const rest: Record<string, unknown> = {};
    if (this.opts.queues) rest.queues = this.opts.queues;
    if (this.opts.prefetch > 0) rest.prefetch = this.opts.prefetch;
    if (this.draining) rest.draining = true;
    if (stopped) rest.stopped = true;
    if (this.opts.credential) rest.credential = this.opts.credential;
    rest.protocol = PROTOCOL_VERSION; // codec is left out: JSON (0) is all this SDK reads
    rest.sent_at = new Date(now).toISOString();
    rest.host = host;
    rest.version = VERSION;
    const text =
      `{"worker_id":${JSON.stringify(this.id)},"job_types":${JSON.stringify(this.jobTypes())},` +
      `"concurrency":${this.opts.concurrency},"in_flight":[${inFlight.join(",")}],` +
      JSON.stringify(rest).slice(1);
    try {
      await this.call(this.rdb!, "main", timeout, ["XADD", this.keys.heartbeats, "MAXLEN", "~", heartbeatStreamLen, "*", "h", text]);
    } catch (e) {
      this.log.warn("heartbeat failed", { error: errText(e) });
    }
  }

  // ---- drain ----

  // drain ends run(): running jobs get the grace period to finish, then
  // are aborted and handed back; prefetched ones go back unrun; results are
  // sent until the grace period ends (and for at least flushMinMs after
  // the last attempt ended).
  private async drain(graceStart: number): Promise<void> {
    const graceEnd = graceStart + this.opts.shutdownGraceMs;
    this.draining = true;
    this.cancelWaiting();
    this.log.info("worker draining", { in_flight: this.running.size, grace_ms: this.opts.shutdownGraceMs });
    let lastEnd = 0;
    let finished = false;
    const idle = this.idle().then(() => {
      finished = true;
      lastEnd = Date.now();
    });
    await this.heartbeat(false);
    await this.releaseQueued();
    await orTimeout(idle, Math.max(0, graceEnd - Date.now()));
    if (!finished) {
      this.log.warn("grace period over: aborting running jobs and handing them back", { in_flight: this.running.size });
      this.cancelAll();
      await orTimeout(idle, cancelWaitMs);
      if (!finished) this.log.error("handlers ignored their abort signal; exiting without them");
    }
    const ended = finished ? lastEnd : Date.now();
    const flushEnd = Math.max(graceEnd, ended + flushMinMs);
    await this.releaseQueued();
    this.senderDeadline = flushEnd;
    this.senderFinish = true;
    this.wakeSender?.();
  }
}

function notStarted(d: Delivery, cause: unknown): Result {
  const now = new Date();
  const r: Result = { jobId: d.jobId, token: d.token, attempt: d.attempt, outcome: "released", reason: "shutdown", error: "worker shut down", startedAt: now };
  if (cause instanceof AttemptAborted && cause.kind === "canceled") {
    return { ...r, outcome: "failed", reason: "canceled", error: "canceled before it started" };
  }
  if (cause instanceof AttemptAborted && cause.kind === "superseded") {
    return { ...r, reason: "superseded", error: cause.message };
  }
  return r;
}

function checkQueues(qs: QueueWeight[]): void {
  if (qs.length === 0) throw new Error("WorkerOptions.queues is empty; leave it out to serve every queue");
  if (qs.length > 64) throw new Error(`WorkerOptions.queues: ${qs.length} queues, at most 64`);
  const seen = new Set<string>();
  for (const q of qs) {
    if (!/^[A-Za-z0-9_.:-]{1,64}$/.test(q.name)) throw new Error(`WorkerOptions.queues: ${JSON.stringify(q.name)} is not 1 to 64 characters from A-Z a-z 0-9 _ . : -`);
    if (!Number.isInteger(q.weight) || q.weight < 0 || q.weight > 1000) throw new Error(`WorkerOptions.queues: the weight of ${q.name} is not between 0 and 1000`);
    if (seen.has(q.name)) throw new Error(`WorkerOptions.queues: ${q.name} is named twice`);
    seen.add(q.name);
  }
}

function positive(v: number | undefined, def: number): number {
  return v !== undefined && v > 0 ? v : def;
}

function errText(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}

// orTimeout waits for p or ms, whichever comes first, and leaves no timer
// behind (a pending one would keep the process alive after run()).
async function orTimeout(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([p, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
