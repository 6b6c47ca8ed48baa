/** Logger receives the worker's log lines; attrs use snake_case keys (job_id, lease_token). */
export interface Logger {
  debug(msg: string, attrs?: Record<string, unknown>): void;
  info(msg: string, attrs?: Record<string, unknown>): void;
  warn(msg: string, attrs?: Record<string, unknown>): void;
  error(msg: string, attrs?: Record<string, unknown>): void;
}

const levels = { debug: 0, info: 1, warn: 2, error: 3 } as const;
type Level = keyof typeof levels;

/**
 * stderrLogger writes one line per entry to stderr in logfmt
 * (time=... level=... msg=... key=value), entries below minLevel dropped.
 */
export function stderrLogger(minLevel: Level = "info"): Logger {
  const min = levels[minLevel];
  const write = (level: Level, msg: string, attrs?: Record<string, unknown>) => {
    if (levels[level] < min) return;
    let line = `time=${new Date().toISOString()} level=${level.toUpperCase()} msg=${quote(msg)}`;
    for (const [k, v] of Object.entries(attrs ?? {})) line += ` ${k}=${quote(v)}`;
    process.stderr.write(line + "\n");
  };
  return {
    debug: (m, a) => write("debug", m, a),
    info: (m, a) => write("info", m, a),
    warn: (m, a) => write("warn", m, a),
    error: (m, a) => write("error", m, a),
  };
}

function quote(v: unknown): string {
  const s = v instanceof Error ? v.message : typeof v === "string" ? v : JSON.stringify(v) ?? String(v);
  return /^[^\s"=]+$/.test(s) ? s : JSON.stringify(s);
}

/** A Logger that drops everything. */
export const discardLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };
