// A job attempt's log (Job.log): the lines a handler logs are kept, the
// newest 64 KiB of the attempt (older ones dropped and counted), and sent
// with the attempt's progress reports and its result (docs/protocol.md,
// "Logs").

/** Bounds of an attempt's lines, as the Go worker's (wire/logs.go). */
export const maxAttemptLogBytes = 64 << 10;
export const maxLogLineBytes = 8 << 10;
export const logLineOverhead = 32;

/** JobLog is what a handler logs with: a message and attributes (key=value). */
export interface JobLog {
  debug(msg: string, attrs?: Record<string, unknown>): void;
  info(msg: string, attrs?: Record<string, unknown>): void;
  warn(msg: string, attrs?: Record<string, unknown>): void;
  error(msg: string, attrs?: Record<string, unknown>): void;
}

/** One line as the protocol carries it. */
export interface LogLine {
  time: string;
  level: string;
  message: string;
}

/** What a result carries: the lines since the attempt's last report. */
export interface Logs {
  lines: LogLine[];
  dropped?: number;
}

/** LogBuffer holds an attempt's lines not yet handed to the sender. */
export class LogBuffer implements JobLog {
  private lines: LogLine[] = [];
  private sizes: number[] = [];
  private size = 0;
  private dropped = 0;
  private closed = false;

  /** notify is called when a line arrives in an empty buffer; mirror gets every line. */
  constructor(
    private readonly notify?: () => void,
    private readonly mirror?: (level: string, message: string) => void,
  ) {}

  debug(msg: string, attrs?: Record<string, unknown>): void {
    this.add("DEBUG", msg, attrs);
  }
  info(msg: string, attrs?: Record<string, unknown>): void {
    this.add("INFO", msg, attrs);
  }
  warn(msg: string, attrs?: Record<string, unknown>): void {
    this.add("WARN", msg, attrs);
  }
  error(msg: string, attrs?: Record<string, unknown>): void {
    this.add("ERROR", msg, attrs);
  }

  private add(level: string, msg: string, attrs?: Record<string, unknown>): void {
    if (this.closed) return;
    let text = String(msg);
    for (const [k, v] of Object.entries(attrs ?? {})) text += ` ${k}=${attrValue(v)}`;
    text = cutUtf8(text, maxLogLineBytes);
    const size = Buffer.byteLength(text, "utf8") + logLineOverhead;
    const wasEmpty = this.lines.length === 0;
    this.lines.push({ time: new Date().toISOString(), level, message: text });
    this.sizes.push(size);
    this.size += size;
    let drop = 0;
    while (this.size > maxAttemptLogBytes && drop < this.lines.length - 1) this.size -= this.sizes[drop++]!;
    if (drop > 0) {
      this.dropped += drop;
      this.lines.splice(0, drop);
      this.sizes.splice(0, drop);
    }
    this.mirror?.(level, text);
    if (wasEmpty) this.notify?.();
  }

  /** take returns the lines held (and the count dropped before them) and empties the buffer; close drops later lines. */
  take(close = false): Logs | undefined {
    this.closed ||= close;
    if (this.lines.length === 0 && this.dropped === 0) return undefined;
    const out: Logs = { lines: this.lines };
    if (this.dropped > 0) out.dropped = this.dropped;
    this.lines = [];
    this.sizes = [];
    this.size = 0;
    this.dropped = 0;
    return out;
  }
}

// attrValue is v as key=value shows it, quoted (JSON) when empty or holding
// a space, a quote, an = or a control character.
function attrValue(v: unknown): string {
  const s = v instanceof Error ? v.message : typeof v === "string" ? v : (JSON.stringify(v) ?? String(v));
  return s !== "" && !/[\s"=\u0000-\u001f\u007f-\u009f]/.test(s) ? s : JSON.stringify(s);
}

// cutUtf8 cuts s to at most max bytes of UTF-8, on a character boundary.
function cutUtf8(s: string, max: number): string {
  if (Buffer.byteLength(s, "utf8") <= max) return s;
  let n = 0;
  let out = "";
  for (const ch of s) {
    const b = Buffer.byteLength(ch, "utf8");
    if (n + b > max) break;
    n += b;
    out += ch;
  }
  return out;
}
