// A test server on a free loopback port: its URL, and a close that also ends the connections still open
// (keep-alive clients, streams a test left hanging), so a test's fake never outlives it.
import type http from 'node:http';
import type { AddressInfo } from 'node:net';

export async function listenLocal(server: http.Server): Promise<{ url: string; close(): Promise<void> }> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}
