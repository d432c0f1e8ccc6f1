// Server-sent events on a hijacked fastify reply: `data: {json}\n\n` (OpenAI) or
// `event: NAME\ndata: {json}\n\n` (Anthropic). Each call is one write, so one engine step's chunk
// leaves as one piece; the socket has Nagle off so it leaves at once.
import type { FastifyReply } from 'fastify';
import type { ServerResponse } from 'node:http';

export class SseStream {
  private readonly res: ServerResponse;
  private ended = false;

  constructor(reply: FastifyReply) {
    reply.hijack();
    // A streamed request logs its own line when its stream ends (the server's onResponse hook skips it).
    (reply.request as { lumenStreamed?: boolean }).lumenStreamed = true;
    this.res = reply.raw;
    this.res.socket?.setNoDelay(true);
    this.res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    // Headers now (the client's create() resolves); the first event waits for the first token.
    this.res.flushHeaders();
  }

  /** The client is gone (or the stream ended). */
  get closed(): boolean {
    return this.ended || this.res.destroyed || this.res.writableEnded;
  }

  /** Calls `fn` once if the client disconnects before the stream ends. */
  onDisconnect(fn: () => void): void {
    this.res.on('close', () => {
      if (!this.ended) fn();
    });
  }

  /** One `data:` event per payload, all in one write. */
  data(...payloads: unknown[]): void {
    this.write(payloads.map((p) => `data: ${JSON.stringify(p)}\n\n`).join(''));
  }

  event(name: string, payload: unknown): void {
    this.write(`event: ${name}\ndata: ${JSON.stringify(payload)}\n\n`);
  }

  /** A literal line, e.g. `data: [DONE]`. */
  line(text: string): void {
    this.write(`${text}\n\n`);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (!this.res.destroyed) this.res.end();
  }

  private write(s: string): void {
    if (!this.closed) this.res.write(s);
  }
}
