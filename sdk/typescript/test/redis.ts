// A private redis-server for the tests, started from the binary on PATH on
// a free port, without persistence.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, createServer, createServer as createNetServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "redis";

export type TestRedisClient = ReturnType<typeof createClient>;

export class RedisServer {
  private proc?: ChildProcess;
  private dir = ""; // made by the first start, so a test file never run leaves none
  port = 0;

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /**
   * start starts the server (on the same port as before, after a stop) and
   * waits until it answers, as itself: a restart must not end up talking
   * to whatever else took the port while the server was down.
   */
  async start(): Promise<void> {
    if (this.port === 0) this.port = await freePort();
    if (this.dir === "") this.dir = mkdtempSync(join(tmpdir(), "dts-ts-redis-"));
    const proc = spawn("redis-server", ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", this.dir], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    this.proc = proc;
    const exited = new Promise<never>((_, reject) =>
      proc.once("exit", (code) => reject(new Error(`redis-server on port ${this.port} exited with ${code}`))),
    );
    exited.catch(() => {});
    const deadline = Date.now() + 10_000;
    for (;;) {
      const c = createClient({ url: this.url, socket: { reconnectStrategy: false, connectTimeout: 2_000 } });
      c.on("error", () => {});
      try {
        const info = await within(2_000, `redis-server on port ${this.port} to answer`, Promise.race([c.connect().then(() => c.info("server")), exited]));
        const pid = /process_id:(\d+)/.exec(info)?.[1];
        if (pid !== String(proc.pid)) throw new Error(`port ${this.port} is answered by process ${pid}, not by the redis-server started (${proc.pid})`);
        c.destroy();
        return;
      } catch (e) {
        if (c.isOpen) c.destroy();
        if (Date.now() > deadline) {
          await this.stop();
          throw e;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /** stop kills the server and waits for it to exit. */
  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGKILL");
    await exited;
  }

  async close(): Promise<void> {
    await this.stop();
    if (this.dir !== "") rmSync(this.dir, { recursive: true, force: true });
  }

  async client(): Promise<TestRedisClient> {
    const c = createClient({ url: this.url });
    c.on("error", () => {});
    await c.connect();
    return c;
  }
}

// freePort finds a free port below the kernel's ephemeral range, so that
// no connection's or listener's automatic port can take it while a test
// has its server stopped (a client reconnecting to it could even connect
// to itself from it).
async function freePort(): Promise<number> {
  const low = ephemeralLow();
  for (let tries = 0; ; tries++) {
    const port = 10_000 + Math.floor(Math.random() * Math.max(1, low - 10_000));
    try {
      await new Promise<void>((resolve, reject) => {
        const s = createServer();
        s.once("error", reject);
        s.listen(port, "127.0.0.1", () => s.close(() => resolve()));
      });
      return port;
    } catch (e) {
      if (tries >= 100) throw e;
    }
  }
}

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 11_000) return low;
  } catch {
    // not Linux: the common default
  }
  return 32_768;
}

/** within waits for p at most ms, then fails naming what it waited for. */
export async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** waitFor polls cond until it returns a value other than undefined/false, or fails after timeoutMs naming what. */
export async function waitFor<T>(what: string, cond: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let pause = 10;
  for (;;) {
    // A cond that itself hangs (a command on a client that never
    // reconnects) fails at the deadline too.
    const v = await within(Math.max(1, deadline - Date.now()), what, Promise.resolve(cond()));
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 100);
  }
}

/**
 * BlackholeProxy forwards TCP connections to a Redis server until
 * blackhole() is called: from then on the connections it holds swallow
 * everything, neither answering nor closing (a half-open link, as a
 * dropped NAT entry or a partition leaves it), while new connections are
 * forwarded again.
 */
export class BlackholeProxy {
  private readonly server = createNetServer();
  private readonly pairs: Array<{ dead: boolean; a: Socket; b: Socket }> = [];
  port = 0;

  constructor(private readonly targetPort: number) {
    this.server.on("connection", (a: Socket) => {
      const b = connect(this.targetPort, "127.0.0.1");
      const pair = { dead: false, a, b };
      this.pairs.push(pair);
      a.on("data", (d) => pair.dead || b.write(d));
      b.on("data", (d) => pair.dead || a.write(d));
      a.on("error", () => {});
      b.on("error", () => {});
      a.on("close", () => pair.dead || b.destroy());
      b.on("close", () => pair.dead || a.destroy());
    });
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", r));
    const a = this.server.address();
    this.port = typeof a === "object" && a ? a.port : 0;
  }

  blackhole(): void {
    for (const p of this.pairs) p.dead = true;
  }

  async close(): Promise<void> {
    for (const p of this.pairs) {
      p.a.destroy();
      p.b.destroy();
    }
    await new Promise((r) => this.server.close(r));
  }
}
