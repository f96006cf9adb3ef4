/** Serving a worker on Node (`@hono/node-server`), bound before it is announced so callers can use
 * port 0 and learn the real address. */
import { serve as nodeServe, type ServerType } from "@hono/node-server";
import type { AddressInfo } from "node:net";

export interface RunningServer {
  url: string;
  close(): Promise<void>;
}

/** Serves `fetchHandler` on `hostname:port` (port 0 picks a free one); prints `listening on
 * http://host:port/` when `announce` (default true). */
export function serve(
  fetchHandler: (request: Request) => Promise<Response> | Response,
  { hostname = "127.0.0.1", port = 8081, announce = true }: { hostname?: string; port?: number; announce?: boolean } = {},
): Promise<RunningServer> {
  return new Promise((resolve) => {
    let server: ServerType;
    server = nodeServe({ fetch: fetchHandler, hostname, port }, (info: AddressInfo) => {
      const host = info.family === "IPv6" ? `[${info.address}]` : info.address;
      const url = `http://${host}:${info.port}/`;
      if (announce) console.log(`listening on ${url}`);
      resolve({
        url,
        close: () => new Promise<void>((done) => server.close(() => done())),
      });
    });
  });
}
