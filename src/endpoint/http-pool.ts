// An HTTP client over one keep-alive connection pool to one server (http or https), with no cap on
// the connections below what the caller runs at once: a cap below the concurrency would quietly
// serialize requests. JSON requests for the small endpoints, and streamed requests whose `sentMs` is
// stamped on the client's monotonic clock (performance.now()) once the connection is up, just before
// the body is written, so connection setup counts as client-side queue time, not as server time.
import http from 'node:http';
import https from 'node:https';
import { performance } from 'node:perf_hooks';
import { bytesText } from '../util/bytes-text.js';

export interface HttpPoolOptions {
  /** Bearer token sent as `Authorization` (the value of --api-key-env's variable). */
  apiKey?: string | null;
  /** The most bytes json() reads of one response (default MAX_JSON_BYTES). */
  maxJsonBytes?: number;
}

/**
 * The most json() reads of one response: the small endpoints (/v1/models, /tokenize, /metrics, the
 * version endpoints, the probe) answer in kilobytes; a body past this is refused, not buffered (a
 * 512 MiB one would not fit in a string).
 */
export const MAX_JSON_BYTES = 16 * 1024 * 1024;

export interface JsonResponse {
  status: number;
  /** The parsed body, or null when it was not JSON. */
  json: unknown;
  text: string;
}

export interface StreamHandlers {
  /** The body is about to be written on a connected socket (monotonic ms). */
  onSent?(atMs: number): void;
  /** The response status and headers arrived. */
  /** `contentType`: the response's content-type header ('' when none). */
  onResponse?(status: number, atMs: number, contentType: string): void;
  /**
   * A piece of the response body (UTF-8), with its arrival time. 'end': the response is complete
   * (an SSE stream's data: [DONE]): the request resolves now, and what the server still sends, or a
   * connection it keeps open, is drained without waiting (the connection returns to the pool when
   * the server ends it).
   */
  onData(text: string, atMs: number): void | 'end';
}

export interface RequestLimits {
  timeoutMs?: number;
  /** What set timeoutMs, for the timeout's message (default: --timeout-s). */
  timeoutSource?: string;
  signal?: AbortSignal;
}

/**
 * Why a request got no complete response: the network, the time limit, the caller's abort, or a
 * response this client refused to read on (too large, or malformed: a handler threw on it).
 */
export class HttpFailure extends Error {
  constructor(message: string, readonly kind: 'network' | 'timeout' | 'aborted' | 'protocol') {
    super(message);
    this.name = 'HttpFailure';
  }
}

/** A reused keep-alive connection the server had closed (internal: the request is sent again). */
class StaleConnection extends HttpFailure {
  constructor(message: string) {
    super(message, 'network');
  }
}

export class HttpPool {
  readonly base: URL;
  private readonly agent: http.Agent;
  private readonly mod: typeof http | typeof https;
  private readonly headers: Record<string, string>;
  private readonly maxJsonBytes: number;

  constructor(baseUrl: string, opts: HttpPoolOptions = {}) {
    this.base = new URL(baseUrl);
    const https_ = this.base.protocol === 'https:';
    this.mod = https_ ? https : http;
    // maxSockets Infinity: never fewer connections than requests in flight.
    const agentOpts = { keepAlive: true, keepAliveMsecs: 60_000, maxSockets: Infinity, maxFreeSockets: 4096 };
    this.agent = https_ ? new https.Agent(agentOpts) : new http.Agent(agentOpts);
    this.headers = opts.apiKey ? { authorization: `Bearer ${opts.apiKey}` } : {};
    this.maxJsonBytes = opts.maxJsonBytes ?? MAX_JSON_BYTES;
  }

  /** The URL of `path` under the base (a base path such as `/v1/` is kept: paths are joined to it). */
  url(path: string): URL {
    const basePath = this.base.pathname.replace(/\/+$/, '');
    const u = new URL(this.base.href);
    u.pathname = `${basePath}${path.startsWith('/') ? path : `/${path}`}`;
    return u;
  }

  /** A request whose whole body is read (at most maxJsonBytes, else it fails); `json` is the body parsed when it is JSON. */
  async json(method: 'GET' | 'POST', path: string, body?: unknown, limits: RequestLimits = {}): Promise<JsonResponse> {
    let text = '';
    let bytes = 0;
    const max = this.maxJsonBytes;
    const status = await this.send(method, path, body, {
      onData: (t) => {
        bytes += Buffer.byteLength(t);
        if (bytes > max) throw new Error(`the response is larger than ${bytesText(max)}, the most this client reads from ${path}`);
        text += t;
      },
    }, limits);
    let json: unknown = null;
    try {
      json = JSON.parse(text);
    } catch { /* not JSON */ }
    return { status, json, text };
  }

  /** A request whose body streams to `handlers`; resolves with the status once the body ended. */
  stream(path: string, body: unknown, handlers: StreamHandlers, limits: RequestLimits = {}): Promise<number> {
    return this.send('POST', path, body, handlers, limits);
  }

  /**
   * One request; sent again, once, on a fresh connection when a kept-alive connection turns out to
   * have been closed by the server: reset or broken before any byte of a response came back. Some
   * servers (llama.cpp's) close the connection after a streamed response while announcing
   * keep-alive, and the close reaches the client only after it has reused the connection; the
   * server never read that request. Timing starts again at the new send (`onSent` is called again).
   */
  private async send(method: string, path: string, body: unknown, h: StreamHandlers, limits: RequestLimits): Promise<number> {
    try {
      return await this.sendOnce(method, path, body, h, limits, false);
    } catch (err) {
      if (!(err instanceof StaleConnection)) throw err;
      return this.sendOnce(method, path, body, h, limits, true);
    }
  }

  private sendOnce(method: string, path: string, body: unknown, h: StreamHandlers, limits: RequestLimits, fresh: boolean): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const u = this.url(path);
      const payload = body === undefined ? null : Buffer.from(JSON.stringify(body));
      const headers: Record<string, string | number> = { ...this.headers, accept: 'application/json, text/event-stream' };
      if (payload) {
        headers['content-type'] = 'application/json';
        headers['content-length'] = payload.length;
      }
      let settled = false;
      let timer: NodeJS.Timeout | null = null;
      const fail = (err: HttpFailure) => {
        if (settled) return;
        settled = true;
        cleanup();
        req.destroy();
        reject(err);
      };
      const onAbort = () => fail(new HttpFailure('cancelled', 'aborted'));
      const cleanup = () => {
        if (timer) clearTimeout(timer);
        limits.signal?.removeEventListener('abort', onAbort);
      };
      let responded = false;
      // A handler that throws on what the server sent fails this request, never the process.
      const guarded = (what: () => void) => {
        try {
          what();
        } catch (err) {
          fail(new HttpFailure(`${method} ${u.pathname}: ${err instanceof Error ? err.message : String(err)}`, 'protocol'));
        }
      };
      // A fresh connection for the retry: this agent would hand back another idle one the server may also have closed.
      const req = this.mod.request(u, { method, agent: fresh ? false : this.agent, headers }, (res) => {
        responded = true;
        guarded(() => h.onResponse?.(res.statusCode ?? 0, performance.now(), String(res.headers['content-type'] ?? '')));
        res.setEncoding('utf8');
        // The response is complete: at its end, or where the handler says so (its data: [DONE]).
        const complete = () => {
          if (settled) return;
          settled = true;
          cleanup();
          resolve(res.statusCode ?? 0);
        };
        res.on('data', (d: string) => {
          if (!settled) guarded(() => { if (h.onData(d, performance.now()) === 'end') complete(); });
        });
        res.on('end', complete);
        res.on('error', (err) => fail(new HttpFailure(`${method} ${u.pathname}: the response broke off (${err.message})`, 'network')));
        res.on('aborted', () => fail(new HttpFailure(`${method} ${u.pathname}: the server closed the connection mid-response`, 'network')));
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        const message = `${method} ${withoutCredentials(u)}: ${err.code ? `${err.code} ` : ''}${err.message}`.trim();
        const stale = !fresh && !responded && req.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE');
        fail(stale ? new StaleConnection(message) : new HttpFailure(message, 'network'));
      });
      if (limits.timeoutMs !== undefined && Number.isFinite(limits.timeoutMs)) {
        timer = setTimeout(() => fail(new HttpFailure(`${method} ${u.pathname}: no complete response within ${limits.timeoutMs! / 1000} s (${limits.timeoutSource ?? '--timeout-s'})`, 'timeout')), limits.timeoutMs);
        timer.unref();
      }
      if (limits.signal) {
        if (limits.signal.aborted) return onAbort();
        limits.signal.addEventListener('abort', onAbort);
      }
      const write = () => {
        if (settled) return;
        guarded(() => h.onSent?.(performance.now()));
        if (!settled) req.end(payload ?? undefined);
      };
      req.on('socket', (socket) => {
        // A fresh connection: wait until it is up, so the stamp excludes the connect (and TLS) time.
        const s = socket as import('node:net').Socket & { encrypted?: boolean };
        if (s.connecting) s.once(s.encrypted ? 'secureConnect' : 'connect', write);
        else write();
      });
    });
  }

  /** Opens `n` connections (one small GET each, concurrently), so the requests that follow find them. */
  async warm(n: number, path = '/v1/models'): Promise<void> {
    await Promise.all(Array.from({ length: n }, () => this.json('GET', path, undefined, { timeoutMs: 30_000 }).catch(() => undefined)));
  }

  close(): void {
    this.agent.destroy();
  }
}

/** A URL for a message: never with the user and password it may carry. */
function withoutCredentials(u: URL): string {
  const shown = new URL(u.href);
  shown.username = '';
  shown.password = '';
  return shown.href;
}
