// The client of the submitter's HTTP API (docs/api.md). Answers are the
// API's JSON as it is (snake_case, job ids as decimal strings); arguments
// are camelCase.

/** Defaults of ClientOptions. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8000";
export const DEFAULT_MAX_ATTEMPTS = 5;
export const DEFAULT_MAX_RETRY_WAIT_MS = 30_000;
export const DEFAULT_POLL_INTERVAL_MS = 1000;

/** ClientOptions configures a Client; fields left out take the defaults in their comments. */
export interface ClientOptions {
  /** The submitter's URL, with an optional path prefix. Default http://127.0.0.1:8000. */
  baseUrl?: string | undefined;
  /** Sent as "Authorization: Bearer <token>": an API key (dts_…) or a JWT. Default none. */
  token?: string | undefined;
  /** How many times a request is sent while the answer says to try again; 1 turns retries off. Default 5. */
  maxAttempts?: number | undefined;
  /** The longest wait before a retry, in ms: an answer asking for longer is returned instead. Default 30000. */
  maxRetryWaitMs?: number | undefined;
  /** The longest pause between two polls of wait(), in ms (it starts at 50 and doubles). Default 1000. */
  pollIntervalMs?: number | undefined;
  /** The fetch function to use. Default the global fetch. */
  fetch?: typeof fetch | undefined;
}

/** The optional fields of a submission (docs/api.md, "Submit a job"). */
export interface SubmitOptions {
  /** The job's queue (default "default"). */
  queue?: string | undefined;
  /** -1000..1000 (default 0); higher runs first. */
  priority?: number | undefined;
  /** Retries after a failed first attempt, 0..100 (default 3). */
  maxRetries?: number | undefined;
  /** Makes the first attempt due this many seconds from now. Not with runAt. */
  delaySeconds?: number | undefined;
  /** Makes the first attempt due then. Not with delaySeconds. */
  runAt?: Date | string | undefined;
  /** Bounds each attempt, counted from its handler's start (0: none). */
  timeoutSeconds?: number | undefined;
  /** A repeat with the same key answers the first job instead of creating another; also lets the client retry the submission safely. */
  idempotencyKey?: string | undefined;
  /** Ids of existing jobs that must all complete before this one runs. */
  dependsOn?: string[] | undefined;
  /** In submitBatch only: earlier jobs of the same batch, by index. */
  dependsOnIndex?: number[] | undefined;
  /** Makes the job unique for this many seconds (docs/api.md, "Unique jobs"). */
  uniqueFor?: number | undefined;
  /** The states in which the first unique job still counts. Only with uniqueFor. */
  uniqueStates?: string[] | undefined;
  /** Replaces the payload in the uniqueness key. Only with uniqueFor. */
  uniqueKey?: string | undefined;
  /** Puts the job under the limit of this key. */
  concurrencyKey?: string | undefined;
}

/** One job of submitBatch. */
export interface JobRequest extends SubmitOptions {
  /** The job type, which selects the handler. */
  name: string;
  /** Any JSON value; left out: null. */
  payload?: unknown;
}

/** The answer to a submission: the job's id and status. */
export interface Submitted {
  job_id: string;
  status: string;
  cancel_requested?: boolean;
  /** submit only: true if the job was created (201), false if an idempotency key or a unique claim matched an earlier one (200). */
  created?: boolean;
}

/** A job as GET /jobs/{id} shows it (docs/api.md, "Get a job"). */
export interface Job {
  job_id: string;
  name: string;
  queue: string;
  priority: number;
  payload: unknown;
  status: string;
  attempts: number;
  max_retries: number;
  timeout_seconds: number;
  last_error: string | null;
  errors: Array<{ attempt: number; error: string; reason: string; worker_id: string; at: string; [k: string]: unknown }>;
  result: unknown;
  worker_id: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  next_run_at: string | null;
  cancel_requested: boolean;
  progress: number | null;
  progress_message: string | null;
  limit_key?: string;
}

/** Job statuses. */
export const Status = {
  Waiting: "waiting",
  Pending: "pending",
  Leased: "leased",
  Retrying: "retrying",
  Completed: "completed",
  Failed: "failed",
  Canceled: "canceled",
} as const;

/** terminal reports whether a job in status will not change on its own. */
export function terminal(status: string): boolean {
  return status === Status.Completed || status === Status.Failed || status === Status.Canceled;
}

/**
 * DtsError is an error answer (4xx or 5xx) from the API: code is its
 * stable code (docs/api.md#errors), such as "not_found"; empty when the
 * answer was not the API's JSON error (a proxy's page, for example).
 */
export class DtsError extends Error {
  readonly status: number;
  readonly code: string;
  /** The server's explanation, for people (message adds the status and code). */
  readonly apiMessage: string;
  /** The wait the server asked for (Retry-After), in ms, or 0. */
  readonly retryAfterMs: number;
  constructor(status: number, code: string, message: string, retryAfterMs = 0) {
    super(message ? `dts: ${status} ${code || "error"}: ${message}` : `dts: ${status} ${code || "error"}`);
    this.name = "DtsError";
    this.status = status;
    this.code = code;
    this.retryAfterMs = retryAfterMs;
    this.apiMessage = message;
  }
}

interface Request {
  method: string;
  path: string; // escaped
  body?: unknown;
  idempotent: boolean; // safe to resend after an answer that may have acted
}

/**
 * Client talks to one submitter. A request is retried, after its
 * Retry-After (or a short jittered backoff), when the server guarantees it
 * did nothing (429 rate_limited, 503 overloaded, 503 backlog_full), or on
 * the other 503s when it may be repeated safely: reads, and submissions
 * whose every job has an idempotency key.
 */
export class Client {
  private readonly base: string;
  private readonly token?: string;
  private readonly maxAttempts: number;
  private readonly maxRetryWaitMs: number;
  private readonly pollIntervalMs: number;
  private readonly fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    const u = new URL(options.baseUrl ?? DEFAULT_BASE_URL);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error(`baseUrl ${u.href} must be an http or https URL`);
    if (u.search || u.hash) throw new Error(`baseUrl ${u.href} must not have a query or fragment`);
    if (options.token && /[\r\n]/.test(options.token)) throw new Error("token contains a line break");
    this.base = u.href.replace(/\/+$/, "");
    if (options.token) this.token = options.token;
    this.maxAttempts = options.maxAttempts && options.maxAttempts > 0 ? options.maxAttempts : DEFAULT_MAX_ATTEMPTS;
    this.maxRetryWaitMs = options.maxRetryWaitMs && options.maxRetryWaitMs > 0 ? options.maxRetryWaitMs : DEFAULT_MAX_RETRY_WAIT_MS;
    this.pollIntervalMs = options.pollIntervalMs && options.pollIntervalMs > 0 ? options.pollIntervalMs : DEFAULT_POLL_INTERVAL_MS;
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /** submit creates a job named name (the job type) with payload and answers once it is stored. */
  async submit(name: string, payload?: unknown, options: SubmitOptions = {}, init: { signal?: AbortSignal | undefined } = {}): Promise<Submitted> {
    const body = wireRequest({ ...options, name, payload });
    const { status, value } = await this.do<Submitted>(
      { method: "POST", path: "/submit_job", body, idempotent: !!options.idempotencyKey },
      init.signal,
    );
    return { ...value, created: status === 201 };
  }

  /** submitBatch creates 1 to 1000 jobs in one statement, all or none, and answers them in order. */
  async submitBatch(jobs: JobRequest[], init: { signal?: AbortSignal | undefined } = {}): Promise<Submitted[]> {
    const body = jobs.map(wireRequest);
    const keyed = jobs.length > 0 && jobs.every((j) => !!j.idempotencyKey);
    const { value } = await this.do<{ jobs: Submitted[] }>({ method: "POST", path: "/submit_jobs", body, idempotent: keyed }, init.signal);
    return value.jobs;
  }

  /** get returns the job with the decimal id; an unknown id is a DtsError with code "not_found". */
  async get(id: string, init: { signal?: AbortSignal | undefined } = {}): Promise<Job> {
    const { value } = await this.do<Job>({ method: "GET", path: `/jobs/${encodeURIComponent(id)}`, idempotent: true }, init.signal);
    return value;
  }

  /**
   * wait polls the job until it is completed, failed or canceled and
   * returns it; check its status (and result or last_error). It polls after
   * 50 ms, then doubles the pause up to pollIntervalMs. signal (or
   * timeoutMs) ends the wait early with an error.
   */
  async wait(id: string, init: { signal?: AbortSignal | undefined; timeoutMs?: number | undefined } = {}): Promise<Job> {
    const deadline = init.timeoutMs !== undefined ? Date.now() + init.timeoutMs : Infinity;
    let pause = 50;
    for (;;) {
      const j = await this.get(id, init);
      if (terminal(j.status)) return j;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`wait for job ${id}: timed out (last ${j.status})`);
      await delay(Math.min(pause, left), init.signal);
      pause = Math.min(2 * pause, this.pollIntervalMs);
    }
  }

  private async do<T>(r: Request, signal?: AbortSignal): Promise<{ status: number; value: T }> {
    const headers: Record<string, string> = { Accept: "application/json", "User-Agent": "dts-ts-client" };
    if (r.body !== undefined) headers["Content-Type"] = "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const body = r.body === undefined ? undefined : JSON.stringify(r.body);
    for (let attempt = 1; ; attempt++) {
      const init: RequestInit = { method: r.method, headers };
      if (body !== undefined) init.body = body;
      if (signal) init.signal = signal;
      const resp = await this.fetch(this.base + r.path, init);
      const text = await resp.text();
      if (resp.status < 400) {
        return { status: resp.status, value: (text ? JSON.parse(text) : undefined) as T };
      }
      const err = apiError(resp, text);
      const wait = this.retryWait(err, r.idempotent, attempt);
      if (wait === undefined) throw err;
      await delay(wait, signal);
    }
  }

  private retryWait(e: DtsError, idempotent: boolean, attempt: number): number | undefined {
    if (attempt >= this.maxAttempts) return undefined;
    const retryable =
      e.status === 429 || (e.status === 503 && (e.code === "overloaded" || e.code === "backlog_full" || idempotent));
    if (!retryable) return undefined;
    let wait = e.retryAfterMs;
    if (wait === 0) {
      // 100ms, 200ms, 400ms, ... up to 5s, with up to 50% jitter.
      wait = Math.min(100 * 2 ** Math.min(attempt - 1, 6), 5000);
      wait += Math.floor(Math.random() * (wait / 2));
    }
    return wait > this.maxRetryWaitMs ? undefined : wait;
  }
}

function wireRequest(j: JobRequest): Record<string, unknown> {
  const w: Record<string, unknown> = { name: j.name };
  if (j.payload !== undefined) w.payload = j.payload;
  const set = (k: string, v: unknown) => {
    if (v !== undefined) w[k] = v;
  };
  set("queue", j.queue);
  set("priority", j.priority);
  set("max_retries", j.maxRetries);
  set("delay_seconds", j.delaySeconds);
  set("run_at", j.runAt instanceof Date ? j.runAt.toISOString() : j.runAt);
  set("timeout_seconds", j.timeoutSeconds);
  set("idempotency_key", j.idempotencyKey);
  set("depends_on", j.dependsOn);
  set("depends_on_index", j.dependsOnIndex);
  set("unique_for", j.uniqueFor);
  set("unique_states", j.uniqueStates);
  set("unique_key", j.uniqueKey);
  set("concurrency_key", j.concurrencyKey);
  return w;
}

function apiError(resp: Response, text: string): DtsError {
  const retryAfter = parseRetryAfter(resp.headers.get("Retry-After"));
  try {
    const e = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    if (e && typeof e.error?.code === "string" && e.error.code !== "") {
      return new DtsError(resp.status, e.error.code, String(e.error.message ?? ""), retryAfter);
    }
  } catch {
    // not the API's JSON error
  }
  let msg = text.trim();
  if (msg.length > 200) msg = msg.slice(0, 200) + "…";
  return new DtsError(resp.status, "", msg, retryAfter);
}

function parseRetryAfter(v: string | null): number {
  if (!v) return 0;
  if (/^\d+$/.test(v)) return Math.min(Number(v), 86_400) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? 0 : Math.max(0, t - Date.now());
}

function delay(ms: number, signal?: AbortSignal): Promise<void> {
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
