/**
 * `ITransport` over the jupyter-cleverthis REST API.  Requests go through
 * `ServerConnection.makeRequest`, which adds the token / XSRF headers and
 * honours the server's base_url.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  IClusterInfo,
  IClusterList,
  IClusterState,
  IComparison,
  IDownloadResult,
  IEventsPage,
  IExportResult,
  IJobDetail,
  IJobPage,
  IJobSpec,
  IJobSummary,
  INodeResources,
  ILogsPage,
  IPreflight,
  IResumeOptions,
  ISchemaBundle,
  ISpecExport,
  ISweepDetail,
  ITemplate,
  ICurves,
  ITensorBoard
} from './model';
import { IJobQuery, ILogTailHandlers, IMetricsQuery, ITransport, TransportError } from './transport';
import { IChatAnswer, IChatRequest } from './tryIt';

/** Path of the API under the server's base URL. */
export const API_PATH = 'cleverthis/api';

/** Options of {@link RestTransport}. */
export interface IRestTransportOptions {
  /** Server settings; `ServerConnection.makeSettings()` when omitted. */
  serverSettings?: ServerConnection.ISettings;
}

export class RestTransport implements ITransport {
  constructor(options: IRestTransportOptions = {}) {
    this.serverSettings = options.serverSettings ?? ServerConnection.makeSettings();
  }

  readonly serverSettings: ServerConnection.ISettings;

  /** Full URL of an API path made of the given (unescaped) segments. */
  url(...segments: string[]): string {
    return URLExt.join(
      this.serverSettings.baseUrl,
      API_PATH,
      ...segments.map(s => encodeURIComponent(s))
    );
  }

  /** Who the server says is asking (from the last cluster list); null until then. */
  get user(): string | null {
    return this._user;
  }

  /** The absolute folder the Jupyter server shows (from the last cluster list); null until then. */
  get serverRoot(): string | null {
    return this._serverRoot;
  }

  async listClusters(): Promise<IClusterInfo[]> {
    const body = await this._request<IClusterList>('GET', ['clusters']);
    this._user = body.user ?? null;
    this._serverRoot = body.server_root ?? null;
    return body.clusters ?? [];
  }

  clusterAction(cluster: string, action: 'up' | 'down'): Promise<IClusterState> {
    return this._request<IClusterState>('POST', ['clusters', cluster, action], {});
  }

  /** The server's websocket tail of a job's log (`.../logs/tail`), with the session's token where it uses one. */
  tailLogs(cluster: string, name: string, handlers: ILogTailHandlers): { close(): void } {
    const settings = this.serverSettings;
    let url = URLExt.join(settings.wsUrl, API_PATH, ...['clusters', cluster, 'jobs', name, 'logs', 'tail'].map(encodeURIComponent));
    if (settings.appendToken && settings.token) {
      url += URLExt.objectToQueryString({ token: settings.token });
    }
    let closed = false;
    const done = () => {
      if (!closed) {
        closed = true;
        handlers.onClose();
      }
    };
    let socket: WebSocket;
    try {
      socket = new settings.WebSocket(url);
    } catch {
      queueMicrotask(done);
      return { close: () => undefined };
    }
    socket.onmessage = event => {
      if (typeof event.data === 'string') {
        handlers.onText(event.data);
      }
    };
    socket.onclose = done;
    socket.onerror = done;
    return {
      close: () => {
        closed = true;
        socket.close();
      }
    };
  }

  async listTemplates(): Promise<ITemplate[]> {
    return (await this._request<{ templates: ITemplate[] }>('GET', ['templates'])).templates ?? [];
  }

  saveTemplate(name: string, spec: Record<string, unknown>): Promise<ITemplate> {
    return this._request<ITemplate>('PUT', ['templates', name], { spec });
  }

  downloadModel(cluster: string, model: string, revision?: string): Promise<IDownloadResult> {
    return this._request<IDownloadResult>('POST', ['clusters', cluster, 'download'], { model, revision: revision ?? null });
  }

  exportCheckpoint(cluster: string, name: string, checkpoint: string, dtype: string): Promise<IExportResult> {
    return this._request<IExportResult>('POST', ['clusters', cluster, 'jobs', name, 'export'], { checkpoint, dtype });
  }

  async listNodes(cluster: string): Promise<INodeResources[]> {
    return (await this._request<{ nodes: INodeResources[] }>('GET', ['clusters', cluster, 'nodes'])).nodes ?? [];
  }

  getSweep(cluster: string, name: string): Promise<ISweepDetail> {
    return this._request<ISweepDetail>('GET', ['clusters', cluster, 'jobs', name, 'sweep']);
  }

  getBestSpec(cluster: string, name: string): Promise<ISpecExport> {
    return this._request<ISpecExport>('GET', ['clusters', cluster, 'jobs', name, 'sweep', 'best']);
  }

  getSpec(cluster: string, name: string): Promise<ISpecExport> {
    return this._request<ISpecExport>('GET', ['clusters', cluster, 'jobs', name, 'spec']);
  }

  async listJobs(cluster: string, options: IJobQuery = {}): Promise<IJobSummary[]> {
    const query = options.owner ? { owner: options.owner } : undefined;
    const body = await this._request<IJobPage>('GET', ['clusters', cluster, 'jobs'], undefined, query);
    return body.jobs ?? [];
  }

  getJob(cluster: string, name: string): Promise<IJobDetail> {
    return this._request<IJobDetail>('GET', ['clusters', cluster, 'jobs', name]);
  }

  createJob(cluster: string, spec: IJobSpec): Promise<IJobDetail> {
    return this._request<IJobDetail>('POST', ['clusters', cluster, 'jobs'], {
      ...spec,
      cluster
    });
  }

  cancelJob(cluster: string, name: string): Promise<IJobDetail> {
    return this._request<IJobDetail>('POST', ['clusters', cluster, 'jobs', name, 'cancel'], {});
  }

  resumeJob(cluster: string, name: string, options: IResumeOptions = {}): Promise<IJobDetail> {
    return this._request<IJobDetail>('POST', ['clusters', cluster, 'jobs', name, 'resume'], { ...options });
  }

  planJob(cluster: string, spec: IJobSpec): Promise<IPreflight> {
    return this._request<IPreflight>('POST', ['clusters', cluster, 'plan'], { ...spec, cluster });
  }

  async getLogs(cluster: string, name: string): Promise<string> {
    const body = await this._request<ILogsPage>('GET', [
      'clusters',
      cluster,
      'jobs',
      name,
      'logs'
    ]);
    return body.text ?? '';
  }

  async getEvents(cluster: string, name: string, since: number): Promise<IEventsPage> {
    const body = await this._request<IEventsPage>(
      'GET',
      ['clusters', cluster, 'jobs', name, 'events'],
      undefined,
      { since: String(Math.max(0, Math.floor(since))) }
    );
    return { events: body.events ?? [], next: typeof body.next === 'number' ? body.next : since };
  }

  getMetrics(cluster: string, name: string, options: IMetricsQuery): Promise<ICurves> {
    const query: Record<string, string> = { max_points: String(options.maxPoints) };
    if (typeof options.afterStep === 'number') {
      query.after_step = String(Math.floor(options.afterStep));
    }
    return this._request<ICurves>('GET', ['clusters', cluster, 'jobs', name, 'metrics'], undefined, query);
  }

  compareJobs(cluster: string, names: readonly string[]): Promise<IComparison> {
    return this._request<IComparison>('GET', ['clusters', cluster, 'compare'], undefined, { jobs: names.join(',') });
  }

  getSchema(): Promise<ISchemaBundle> {
    return this._request<ISchemaBundle>('GET', ['schema']);
  }

  openTensorBoard(cluster: string, name: string): Promise<ITensorBoard> {
    return this._request<ITensorBoard>('GET', ['clusters', cluster, 'jobs', name, 'tensorboard']);
  }

  /** `POST .../chat`: the server streams newline-delimited JSON, read here as it arrives. */
  async chat(
    cluster: string,
    name: string,
    request: IChatRequest,
    onText: (index: number, text: string) => void
  ): Promise<IChatAnswer[]> {
    const response = await this._send('POST', this.url('clusters', cluster, 'jobs', name, 'chat'), request);
    if (!response.ok || !response.body) {
      const data = Private.json(await response.text());
      throw TransportError.fromBody(response.status, data, `The chat failed: ${response.statusText || response.status}`);
    }
    let answers: IChatAnswer[] | null = null;
    const handle = (line: string): void => {
      if (!line.trim()) {
        return;
      }
      const msg = JSON.parse(line) as { type: string; index?: number; text?: string; answers?: IChatAnswer[]; message?: string };
      if (msg.type === 'text') {
        onText(msg.index ?? 0, msg.text ?? '');
      } else if (msg.type === 'answers') {
        answers = msg.answers ?? [];
      } else if (msg.type === 'error') {
        throw new TransportError(msg.message ?? 'the chat failed on the cluster', 502, 'chat_failed');
      }
    };
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let rest = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        break;
      }
      rest += decoder.decode(value, { stream: true });
      const lines = rest.split('\n');
      rest = lines.pop() ?? '';
      lines.forEach(handle);
    }
    handle(rest);
    if (answers === null) {
      throw new TransportError('The chat ended without an answer', 502, 'bad_response');
    }
    return answers;
  }

  private _user: string | null = null;
  private _serverRoot: string | null = null;

  /** Send a request (JSON body when given); a server that cannot be reached is a TransportError. */
  private async _send(method: string, url: string, body?: unknown): Promise<Response> {
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { 'Content-Type': 'application/json' };
    }
    try {
      return await ServerConnection.makeRequest(url, init, this.serverSettings);
    } catch (err) {
      throw new TransportError(
        `Cannot reach the server: ${err instanceof Error ? err.message : String(err)}`,
        0,
        'network_error'
      );
    }
  }

  private async _request<T>(
    method: string,
    segments: string[],
    body?: unknown,
    query?: Record<string, string>
  ): Promise<T> {
    let url = this.url(...segments);
    if (query) {
      url += URLExt.objectToQueryString(query);
    }
    const response = await this._send(method, url, body);
    const data = Private.json(await response.text());
    if (!response.ok) {
      throw TransportError.fromBody(
        response.status,
        data,
        `${method} ${segments.join('/')} failed: ${response.statusText || response.status}`
      );
    }
    if (data === undefined) {
      throw new TransportError(
        `${method} ${segments.join('/')}: the server answered no JSON`,
        response.status,
        'bad_response'
      );
    }
    return data as T;
  }
}

namespace Private {
  /** The JSON of a response's text; undefined when it is empty or not JSON. */
  export function json(text: string): unknown {
    if (!text) {
      return undefined;
    }
    try {
      return JSON.parse(text);
    } catch {
      return undefined;
    }
  }
}
