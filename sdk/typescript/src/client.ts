/** The client: one connection to kruntimes through the Kubernetes API. */
import { Functions } from './functions.js';
import { Sandbox, type CreateSandboxOptions } from './sandbox.js';
import { Tasks } from './tasks.js';
import { Transport, loadKubeConfig, runtimesPath, type ConnectionOptions } from './transport.js';

export interface ClientOptions extends ConnectionOptions {
  /** The namespace of its calls; default the context's (in a Pod: the
   * ServiceAccount's), else "default". */
  namespace?: string;
}

/**
 * A connection to kruntimes through the Kubernetes API. Authentication is
 * @kubernetes/client-node's: the kubeconfig (`kubeconfig`, else
 * $KUBECONFIG, else ~/.kube/config) with its `context` — client
 * certificates, tokens, token files and exec plugins included — or, with no
 * kubeconfig in a Pod, the Pod's ServiceAccount. Every call is authorized by
 * the cluster's RBAC.
 */
export class Client {
  readonly namespace: string;
  readonly functions: Functions;
  readonly tasks: Tasks;
  /** @internal */
  readonly transport: Transport;

  constructor(opts: ClientOptions = {}) {
    const { kubeConfig, namespace } = loadKubeConfig(opts);
    this.namespace = opts.namespace ?? namespace;
    this.transport = new Transport(kubeConfig);
    this.functions = new Functions(this.transport, this.namespace);
    this.tasks = new Tasks(this.transport, this.namespace);
  }

  /** Opens a sandbox on `runtime` (Ready when resolved). */
  sandbox(runtime = 'python', opts: CreateSandboxOptions = {}): Promise<Sandbox> {
    return Sandbox.create(this.transport, this.namespace, runtime, opts);
  }

  /** Attaches to the existing sandbox Run `name`. */
  connectSandbox(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<Sandbox> {
    return Sandbox.connect(this.transport, opts.namespace ?? this.namespace, name, opts);
  }

  /** The Runtime `name` as the API serves it. */
  runtime(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<any> {
    return this.transport.call('GET', runtimesPath(opts.namespace ?? this.namespace, name), { signal: opts.signal });
  }

  /** Closes the client's pooled connections. */
  close(): void {
    this.transport.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
