export {
  Worker,
  PermanentError,
  AttemptAborted,
  VERSION,
  PROTOCOL_VERSION,
  DEFAULT_CONCURRENCY,
  DEFAULT_PREFETCH,
  DEFAULT_HEARTBEAT_INTERVAL_MS,
  DEFAULT_SHUTDOWN_GRACE_MS,
  decodeDelivery,
  progressMessage,
  type AbortKind,
  type Handler,
  type HandlerContext,
  type Job,
  type QueueWeight,
  type WorkerOptions,
} from "./worker.js";
export {
  Client,
  DtsError,
  Status,
  terminal,
  DEFAULT_BASE_URL,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_MAX_RETRY_WAIT_MS,
  DEFAULT_POLL_INTERVAL_MS,
  type ClientOptions,
  type Job as ApiJob,
  type JobRequest,
  type SubmitOptions,
  type Submitted,
} from "./client.js";
export { RawJSON } from "./json.js";
export { type Logger, stderrLogger, discardLogger } from "./log.js";
export { type JobLog, type LogLine } from "./joblog.js";
