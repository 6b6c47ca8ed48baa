// A private redis-server for the tests, started from the binary on PATH on
// a free port, without persistence.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createClient } from "redis";

export type TestRedisClient = ReturnType<typeof createClient>;

export class RedisServer {
  private proc?: ChildProcess;
  private readonly dir = mkdtempSync(join(tmpdir(), "dts-ts-redis-"));
  port = 0;

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** start starts the server (on the same port as before, after a stop) and waits until it answers. */
  async start(): Promise<void> {
    if (this.port === 0) this.port = await freePort();
    const proc = spawn("redis-server", ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", this.dir], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    this.proc = proc;
    const exited = new Promise<never>((_, reject) =>
      proc.once("exit", (code) => reject(new Error(`redis-server exited with ${code}`))),
    );
    exited.catch(() => {});
    const deadline = Date.now() + 10_000;
    for (;;) {
      const c = createClient({ url: this.url, socket: { reconnectStrategy: false } });
      c.on("error", () => {});
      try {
        await Promise.race([c.connect(), exited]);
        await c.ping();
        c.destroy();
        return;
      } catch (e) {
        if (c.isOpen) c.destroy();
        if (Date.now() > deadline) throw e;
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
    rmSync(this.dir, { recursive: true, force: true });
  }

  async client(): Promise<TestRedisClient> {
    const c = createClient({ url: this.url });
    c.on("error", () => {});
    await c.connect();
    return c;
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/** waitFor polls cond until it returns a value other than undefined/false, or fails after timeoutMs naming what. */
export async function waitFor<T>(what: string, cond: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let pause = 10;
  for (;;) {
    const v = await cond();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 100);
  }
}
