// What the tests that start their own redis-server share (this folder is copied alone
// for scripts/test-redis.sh; test/readme.test.mjs imports it too).
import { createConnection, createServer } from 'node:net';

/** A TCP port free on 127.0.0.1 now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Whether a Redis answers PING on `port` within 500 ms. */
export function ping(port) {
  return new Promise((resolve) => {
    const c = createConnection(port, '127.0.0.1');
    let buf = '';
    const timer = setTimeout(() => { c.destroy(); resolve(false); }, 500);
    c.on('connect', () => c.write('PING\r\n'));
    c.on('data', (d) => {
      buf += d;
      if (buf.includes('\r\n')) {
        clearTimeout(timer);
        c.destroy();
        resolve(buf.startsWith('+PONG'));
      }
    });
    c.on('error', () => { clearTimeout(timer); resolve(false); });
  });
}
