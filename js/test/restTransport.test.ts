import { describe, expect, it, vi } from 'vitest';
import { ServerConnection } from '@jupyterlab/services';

import { RestTransport } from '../src/shared/restTransport';
import { errorMessage, TransportError } from '../src/shared';

function setup(status: number, body: unknown) {
  const calls: { url: string; method: string; body: string | null; headers: Headers }[] = [];
  const fetchFn = vi.fn(async (input: RequestInfo, init?: RequestInit) => {
    const request = input instanceof Request ? input : new Request(input, init);
    calls.push({
      // ServerConnection adds a numeric cache-buster (`?1712345678901`); drop it.
      url: request.url.replace(/[?&]\d{10,}$/, ''),
      method: request.method,
      body: request.method === 'GET' ? null : await request.text(),
      headers: request.headers
    });
    return new Response(JSON.stringify(body), {
      status,
      headers: { 'Content-Type': 'application/json' }
    });
  });
  const serverSettings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/user/me/',
    token: 'secret',
    fetch: fetchFn as unknown as typeof fetch,
    Request,
    Headers
  });
  return { transport: new RestTransport({ serverSettings }), calls };
}

describe('RestTransport', () => {
  it('lists clusters under <baseUrl>cleverthis/api with the token', async () => {
    const cluster = { name: 'local', address: 'http://127.0.0.1:8265', status: 'running', managed: true, resources: {} };
    const { transport, calls } = setup(200, { clusters: [cluster] });
    await expect(transport.listClusters()).resolves.toEqual([cluster]);
    expect(calls[0].url).toBe('http://localhost:8888/user/me/cleverthis/api/clusters');
    expect(calls[0].method).toBe('GET');
    expect(calls[0].headers.get('Authorization')).toBe('token secret');
  });

  it('escapes path segments and passes since', async () => {
    const { transport, calls } = setup(200, { events: [{ seq: 4, type: 'step', step: 1, loss: 1 }], next: 5 });
    const page = await transport.getEvents('my cluster', 'job/1', 4);
    expect(page.next).toBe(5);
    expect(calls[0].url).toBe(
      'http://localhost:8888/user/me/cleverthis/api/clusters/my%20cluster/jobs/job%2F1/events?since=4'
    );
  });

  it('POSTs the spec with the cluster', async () => {
    const { transport, calls } = setup(201, { name: 'tiny', status: 'queued' });
    await transport.createJob('local', { name: 'tiny', epochs: 1, job_type: 'train' });
    expect(calls[0].method).toBe('POST');
    expect(calls[0].url).toBe('http://localhost:8888/user/me/cleverthis/api/clusters/local/jobs');
    expect(JSON.parse(calls[0].body!)).toEqual({ name: 'tiny', epochs: 1, job_type: 'train', cluster: 'local' });
  });

  it('POSTs cancel and reads logs', async () => {
    const { transport, calls } = setup(200, { text: 'hello', name: 'tiny' });
    await transport.cancelJob('local', 'tiny');
    expect(calls[0].method).toBe('POST');
    expect(calls[0].url).toMatch(/\/clusters\/local\/jobs\/tiny\/cancel$/);
    await expect(transport.getLogs('local', 'tiny')).resolves.toBe('hello');
    expect(calls[1].url).toMatch(/\/clusters\/local\/jobs\/tiny\/logs$/);
  });

  it('turns {code, message, details} answers into TransportError with field errors', async () => {
    const { transport } = setup(422, {
      code: 'invalid_spec',
      message: 'The job spec is invalid',
      details: { errors: [{ field: 'epochs', message: 'must be >= 1' }] }
    });
    const err = await transport.createJob('local', { name: 'x' }).catch(e => e);
    expect(err).toBeInstanceOf(TransportError);
    expect(err.status).toBe(422);
    expect(err.code).toBe('invalid_spec');
    expect(err.message).toBe('The job spec is invalid');
    expect(err.fieldErrors).toEqual([{ field: 'epochs', message: 'must be >= 1' }]);
    expect(errorMessage(err)).toBe('The job spec is invalid'); // words for the user, no HTTP status code
  });

  it('reports network failures as TransportError', async () => {
    const serverSettings = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: (() => Promise.reject(new TypeError('Failed to fetch'))) as unknown as typeof fetch,
      Request,
      Headers
    });
    const err = await new RestTransport({ serverSettings }).getSchema().catch(e => e);
    expect(err).toBeInstanceOf(TransportError);
    expect(err.code).toBe('network_error');
  });
});
