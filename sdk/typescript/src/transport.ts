/**
 * HTTP to the Kubernetes API with @kubernetes/client-node's configuration.
 *
 * The Kubernetes client loads the kubeconfig (contexts, exec plugins, auth
 * providers, client certificates, token files) or the in-cluster
 * ServiceAccount, and applies its credentials to each request's options.
 * Requests go out with node:http(s) on one keep-alive agent. Node never
 * sends a request twice by itself and nothing here follows a redirect, so
 * an invocation is sent at most once per call.
 */
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

import { Aborted, ConnectFailed, KruntimesError, errorFor, type Status } from './errors.js';

export const GROUP = 'kruntimes.io';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;
export const USER_AGENT = 'kruntimes-typescript/0.1.0';

const SA_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

/** Where the connection came from: a kubeconfig file and context, or a
 * KubeConfig the caller loaded itself. */
export interface ConnectionOptions {
  /** A kubeconfig file; else $KUBECONFIG, else ~/.kube/config, else the
   * Pod's ServiceAccount. */
  kubeconfig?: string;
  /** A context of the kubeconfig; else its current context. */
  context?: string;
  /** A KubeConfig already loaded (takes precedence over kubeconfig). */
  kubeConfig?: KubeConfig;
}

/** Loads the configuration as kubectl does and returns it with the
 * namespace of its context (in a Pod: the ServiceAccount's), else "default". */
export function loadKubeConfig(opts: ConnectionOptions): { kubeConfig: KubeConfig; namespace: string } {
  let kc = opts.kubeConfig;
  if (!kc) {
    kc = new KubeConfig();
    if (opts.kubeconfig) kc.loadFromFile(opts.kubeconfig);
    else kc.loadFromDefault();
  }
  if (opts.context) kc.setCurrentContext(opts.context);
  let namespace = kc.getContextObject(kc.getCurrentContext())?.namespace;
  if (!namespace && kc.getCurrentCluster()?.name === 'inCluster') {
    try {
      namespace = fs.readFileSync(SA_NAMESPACE, 'utf8').trim();
    } catch {
      // not in a Pod after all
    }
  }
  return { kubeConfig: kc, namespace: namespace || 'default' };
}

/** One request. `timeoutMs` bounds how long the socket may stay silent. A
 * body that is an AsyncIterable is sent chunked as it is read, never held
 * whole; an error it throws ends the request unfinished and is the one
 * {@link Transport.open} rejects with. */
export interface RequestSpec {
  method: string;
  path: string;
  query?: Record<string, string | number | boolean | undefined | null>;
  body?: Buffer | string | AsyncIterable<Uint8Array>;
  headers?: Record<string, string>;
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** A whole answer. */
export interface Response {
  code: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * A request that failed without an answer. `sent` is false only when no
 * connection was made, so nothing reached the server.
 */
export class TransportError extends Error {
  override name = 'TransportError';
  constructor(message: string, readonly sent: boolean, readonly aborted: boolean, options?: { cause?: unknown }) {
    super(message, options);
  }
}

interface Credentials {
  headers: Record<string, string>;
  tls: https.AgentOptions;
}

function header(h: http.IncomingHttpHeaders, name: string): string | undefined {
  const v = h[name.toLowerCase()];
  return Array.isArray(v) ? v[0] : v;
}

export { header as headerOf };

/** The decoded metav1.Status of an error answer, or undefined when the body
 * is none (a proxy's plain text). */
export function statusOf(body: Buffer): Status | undefined {
  try {
    const st = JSON.parse(body.toString('utf8'));
    return st && typeof st === 'object' && st.kind === 'Status' ? (st as Status) : undefined;
  } catch {
    return undefined;
  }
}

export function runsPath(namespace: string, name?: string, subresource?: string): string {
  let path = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/runs`;
  if (name) path += `/${encodeURIComponent(name)}`;
  if (subresource) path += `/${subresource}`;
  return path;
}

export function runtimesPath(namespace: string, name?: string): string {
  const path = `/apis/${GROUP}/${VERSION}/namespaces/${encodeURIComponent(namespace)}/runtimes`;
  return name ? `${path}/${encodeURIComponent(name)}` : path;
}

function tlsKey(tls: https.AgentOptions): string {
  const s = (v: unknown) => (v === undefined ? '' : Buffer.isBuffer(v) ? v.toString('base64') : String(v));
  return [s(tls.ca), s(tls.cert), s(tls.key), s(tls.rejectUnauthorized), s(tls.servername)].join('|');
}

/** Writes `body` to `req` chunk by chunk, waiting for each write to drain,
 * and ends it; stops without ending it when an answer came first or the
 * request was destroyed. */
async function sendStreamed(req: http.ClientRequest, body: AsyncIterable<Uint8Array>, answered: () => boolean): Promise<void> {
  for await (const chunk of body) {
    if (answered() || req.destroyed) return;
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : chunk;
    if (!(bytes instanceof Uint8Array)) {
      throw new TypeError(`a streamed body yields Uint8Array (or Buffer) chunks, not ${Object.prototype.toString.call(chunk)}`);
    }
    if (bytes.byteLength === 0) continue;
    if (!req.write(bytes)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          req.off('drain', done);
          req.off('close', done);
          resolve();
        };
        req.on('drain', done);
        req.on('close', done);
      });
    }
  }
  if (!answered() && !req.destroyed) req.end();
}

/** Sends requests to the API server with the caller's credentials. */
export class Transport {
  readonly kubeConfig: KubeConfig;
  readonly server: URL;
  private readonly basePath: string;
  private readonly secure: boolean;
  // Exec plugins and auth providers (token files included) may hand out a
  // new token or certificate for any request; static credentials are
  // resolved once.
  private readonly dynamic: boolean;
  private staticCredentials?: Promise<Credentials>;
  private agent?: http.Agent;
  private agentKey = '';

  constructor(kubeConfig: KubeConfig) {
    this.kubeConfig = kubeConfig;
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new KruntimesError('the kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
    this.basePath = this.server.pathname.replace(/\/+$/, '');
    this.secure = this.server.protocol === 'https:';
    const user = kubeConfig.getCurrentUser();
    this.dynamic = Boolean(user?.exec || user?.authProvider);
  }

  /** Closes the pooled connections. */
  close(): void {
    this.agent?.destroy();
    this.agent = undefined;
  }

  private async resolveCredentials(): Promise<Credentials> {
    const opts: https.RequestOptions = { headers: {} };
    await this.kubeConfig.applyToHTTPSOptions(opts);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts.headers ?? {})) {
      if (v !== undefined) headers[k] = String(v);
    }
    if (opts.auth) headers.Authorization = `Basic ${Buffer.from(opts.auth).toString('base64')}`;
    const tls: https.AgentOptions = {};
    for (const k of ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'] as const) {
      if (opts[k] !== undefined) (tls as Record<string, unknown>)[k] = opts[k];
    }
    return { headers, tls };
  }

  private async credentials(): Promise<Credentials> {
    if (this.dynamic) return this.resolveCredentials();
    this.staticCredentials ??= this.resolveCredentials();
    try {
      return await this.staticCredentials;
    } catch (e) {
      this.staticCredentials = undefined;
      throw e;
    }
  }

  private agentFor(tls: https.AgentOptions): http.Agent {
    const key = this.secure ? tlsKey(tls) : '';
    if (!this.agent || key !== this.agentKey) {
      this.agent?.destroy();
      this.agent = this.secure
        ? new https.Agent({ keepAlive: true, ...tls })
        : new http.Agent({ keepAlive: true });
      this.agentKey = key;
    }
    return this.agent;
  }

  private url(path: string, query?: RequestSpec['query']): string {
    let url = `${this.basePath}${path}`;
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null) params.set(k, String(v));
    }
    const qs = params.toString();
    if (qs) url += `?${qs}`;
    return url;
  }

  /**
   * Sends one request, once, and resolves with the answer as a stream.
   * Rejects with a {@link TransportError} when no answer came.
   */
  async open(spec: RequestSpec): Promise<http.IncomingMessage> {
    if (spec.signal?.aborted) {
      throw new TransportError('aborted before the request was sent', false, true, { cause: spec.signal.reason });
    }
    let creds: Credentials;
    try {
      creds = await this.credentials();
    } catch (e) {
      throw new TransportError(`cannot get credentials from the kubeconfig: ${(e as Error).message}`, false, false, { cause: e });
    }
    const headers: Record<string, string> = {
      Accept: 'application/json',
      'User-Agent': USER_AGENT,
      ...creds.headers,
      ...spec.headers,
    };
    const whole = typeof spec.body === 'string' || Buffer.isBuffer(spec.body) ? spec.body : undefined;
    if (whole !== undefined) headers['Content-Length'] = String(Buffer.byteLength(whole));
    const options: https.RequestOptions = {
      method: spec.method,
      protocol: this.server.protocol,
      hostname: this.server.hostname.replace(/^\[|\]$/g, ''),
      port: this.server.port || undefined,
      path: this.url(spec.path, spec.query),
      headers,
      agent: this.agentFor(creds.tls),
      signal: spec.signal,
    };
    return new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = (this.secure ? https : http).request(options);
      // Whether the connection was made: before that, nothing was sent.
      let connected = false;
      req.on('socket', (socket: Socket) => {
        if (!socket.connecting) {
          connected = true;
          return;
        }
        socket.once(this.secure ? 'secureConnect' : 'connect', () => {
          connected = true;
        });
      });
      if (spec.timeoutMs !== undefined) {
        req.setTimeout(spec.timeoutMs, () => {
          req.destroy(new Error(`no answer within ${spec.timeoutMs} ms`));
        });
      }
      // An answer that comes before the body ended (an error answered
      // at once) stops the sending; so does the source's own error.
      let answered = false;
      let sourceError: unknown;
      req.on('response', (res: http.IncomingMessage) => {
        answered = true;
        resolve(res);
      });
      req.on('error', (err: Error) => {
        if (sourceError !== undefined) {
          reject(sourceError);
          return;
        }
        const aborted = Boolean(spec.signal?.aborted);
        reject(new TransportError(err.message, connected, aborted, { cause: err }));
      });
      const body = spec.body;
      if (body === undefined || typeof body === 'string' || Buffer.isBuffer(body)) {
        req.end(whole);
        return;
      }
      sendStreamed(req, body, () => answered).catch((err: unknown) => {
        sourceError = err;
        req.destroy(err instanceof Error ? err : new Error(String(err)));
      });
    });
  }

  /** Sends one request, once, and reads the whole answer. */
  async send(spec: RequestSpec): Promise<Response> {
    const res = await this.open(spec);
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of res) chunks.push(chunk as Buffer);
    } catch (e) {
      throw new TransportError(`the answer broke off: ${(e as Error).message}`, true, Boolean(spec.signal?.aborted), { cause: e });
    }
    return { code: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) };
  }

  /** A JSON API call: resolves with the decoded answer or rejects with its
   * {@link KruntimesError}. */
  async call<T = any>(
    method: string,
    path: string,
    opts: { run?: string; obj?: unknown; contentType?: string; query?: RequestSpec['query']; signal?: AbortSignal } = {},
  ): Promise<T> {
    const headers: Record<string, string> = {};
    let body: string | undefined;
    if (opts.obj !== undefined) {
      body = JSON.stringify(opts.obj);
      headers['Content-Type'] = opts.contentType ?? 'application/json';
    }
    let resp: Response;
    try {
      resp = await this.send({ method, path, query: opts.query, body, headers, signal: opts.signal, timeoutMs: 60_000 });
    } catch (e) {
      throw this.failure(e, `${method} ${path}`, { run: opts.run });
    }
    if (resp.code >= 300) {
      throw errorFor(resp.code, header(resp.headers, 'Retry-After'), statusOf(resp.body), { run: opts.run });
    }
    return (resp.body.length ? JSON.parse(resp.body.toString('utf8')) : undefined) as T;
  }

  /** Maps a transport failure of a call that is not an invocation. */
  failure(e: unknown, what: string, fields: { run?: string; invocationId?: string }): KruntimesError {
    if (!(e instanceof TransportError)) return e instanceof KruntimesError ? e : new KruntimesError(String(e), { ...fields, cause: e });
    if (e.aborted) {
      const err = new Aborted(`${what}: aborted`, { ...fields, cause: e });
      err.notRun = !e.sent;
      return err;
    }
    if (!e.sent) return new ConnectFailed(`cannot connect to ${this.server.origin}: ${e.message}`, { ...fields, cause: e });
    const err = new KruntimesError(`${what}: ${e.message}`, { ...fields, cause: e });
    err.notRun = false;
    return err;
  }

  /** Yields the events of a watch until the server ends it (after
   * `timeoutSeconds`) or `signal` aborts. */
  async *watch(
    path: string,
    query: Record<string, string | number | undefined>,
    timeoutSeconds: number,
    signal?: AbortSignal,
  ): AsyncGenerator<{ type: string; object: any }> {
    let res: http.IncomingMessage;
    try {
      res = await this.open({
        method: 'GET',
        path,
        query: { ...query, watch: 'true', timeoutSeconds: Math.max(1, Math.ceil(timeoutSeconds)) },
        signal,
        timeoutMs: (timeoutSeconds + 10) * 1000,
      });
    } catch (e) {
      throw this.failure(e, `watch ${path}`, {});
    }
    try {
      if ((res.statusCode ?? 0) >= 300) {
        const chunks: Buffer[] = [];
        for await (const chunk of res) chunks.push(chunk as Buffer);
        throw errorFor(res.statusCode ?? 0, header(res.headers, 'Retry-After'), statusOf(Buffer.concat(chunks)));
      }
      let pending = '';
      try {
        for await (const chunk of res) {
          pending += (chunk as Buffer).toString('utf8');
          let nl: number;
          while ((nl = pending.indexOf('\n')) >= 0) {
            const line = pending.slice(0, nl).trim();
            pending = pending.slice(nl + 1);
            if (line) yield JSON.parse(line);
          }
        }
      } catch (e) {
        if (e instanceof KruntimesError || e instanceof SyntaxError) throw e;
        throw this.failure(new TransportError((e as Error).message, true, Boolean(signal?.aborted), { cause: e }), `watch ${path}`, {});
      }
    } finally {
      // A watch stopped early has unread data: never hand its connection
      // to another request.
      res.destroy();
    }
  }
}
