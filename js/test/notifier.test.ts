import { describe, expect, it, vi } from 'vitest';

import { JobNotifier, IJobNotice } from '../src/notifier';
import { ITransport, cloneName } from '../src/shared';
import { makeDetail, makeJob } from './fixtures';

/** A transport whose jobs the test changes between rounds. */
function fakeTransport(jobs: { current: ReturnType<typeof makeJob>[] }, user: string | null = 'alice') {
  return {
    user,
    listClusters: vi.fn(async () => [
      { name: 'local', address: 'http://127.0.0.1:8265', status: 'running', managed: true, resources: null },
      { name: 'off', address: 'http://127.0.0.1:1', status: 'stopped', managed: true, resources: null }
    ]),
    listJobs: vi.fn(async (_cluster: string, options: { owner?: string } = {}) =>
      jobs.current.filter(j => !options.owner || j.owner === options.owner)
    ),
    getJob: vi.fn(async (_cluster: string, name: string) => {
      const job = jobs.current.find(j => j.name === name)!;
      return makeDetail({ ...job, error: 'CUDA out of memory.\nTraceback ...', advice: 'Retry with QLoRA.' });
    })
  } as unknown as ITransport & { listJobs: ReturnType<typeof vi.fn>; getJob: ReturnType<typeof vi.fn> };
}

describe('JobNotifier', () => {
  it('announces each followed job once when it ends, never one that had ended before it was seen', async () => {
    const jobs = {
      current: [
        makeJob(1, { owner: 'alice', status: 'running' }),
        makeJob(2, { owner: 'alice', status: 'succeeded' }), // ended before: never announced
        makeJob(3, { owner: 'bob', status: 'running' }), // someone else's, not opened here
        makeJob(4, { owner: 'bob', status: 'running' }) // someone else's, opened here
      ]
    };
    const notices: IJobNotice[] = [];
    const transport = fakeTransport(jobs);
    const notifier = new JobNotifier({ transport, notify: n => notices.push(n) });
    notifier.watch('local', 'job-0004', 'running');
    await notifier.check();
    expect(notices).toEqual([]);
    expect(transport.listJobs).toHaveBeenCalledWith('local', { owner: 'alice' }); // one request for the user's jobs
    expect(transport.listJobs).not.toHaveBeenCalledWith('off', expect.anything()); // a stopped cluster is skipped

    jobs.current = [
      makeJob(1, { owner: 'alice', status: 'failed' }),
      makeJob(2, { owner: 'alice', status: 'succeeded' }),
      makeJob(3, { owner: 'bob', status: 'succeeded' }),
      makeJob(4, { owner: 'bob', status: 'cancelled' })
    ];
    await notifier.check();
    expect(notices.map(n => [n.name, n.kind])).toEqual([
      ['job-0001', 'error'],
      ['job-0004', 'info']
    ]);
    // a failure says the triage headline and its advice, not the traceback
    expect(notices[0].message).toBe('Training job \u201cjob-0001\u201d failed: CUDA out of memory. Retry with QLoRA.');
    expect(notices[1].message).toBe('Training job \u201cjob-0004\u201d was cancelled.');
    await notifier.check();
    expect(notices.length).toBe(2); // once each
    notifier.dispose();
  });

  it('announces a job created here that ended before the first round saw it running', async () => {
    const jobs = { current: [makeJob(7, { owner: 'alice', status: 'succeeded' })] };
    const notices: IJobNotice[] = [];
    const notifier = new JobNotifier({ transport: fakeTransport(jobs), notify: n => notices.push(n) });
    notifier.watch('local', 'job-0007', 'queued');
    await notifier.check();
    expect(notices.map(n => [n.name, n.kind, n.message])).toEqual([
      ['job-0007', 'success', 'Training job \u201cjob-0007\u201d succeeded.']
    ]);
    notifier.dispose();
  });

  it('stays quiet while the setting is off', async () => {
    const jobs = { current: [makeJob(1, { owner: 'alice', status: 'running' })] };
    const notices: IJobNotice[] = [];
    let on = false;
    const transport = fakeTransport(jobs);
    const notifier = new JobNotifier({ transport, notify: n => notices.push(n), enabled: () => on });
    await notifier.check();
    expect(transport.listJobs).not.toHaveBeenCalled();
    on = true;
    await notifier.check();
    jobs.current = [makeJob(1, { owner: 'alice', status: 'succeeded' })];
    await notifier.check();
    expect(notices.length).toBe(1);
    notifier.dispose();
  });
});

describe('cloneName', () => {
  it('numbers copies, skipping names in use, within 64 characters', () => {
    expect(cloneName('llama-support', [])).toBe('llama-support-2');
    expect(cloneName('llama-support', ['llama-support-2'])).toBe('llama-support-3');
    expect(cloneName('run-2', ['run-3'])).toBe('run-4');
    expect(cloneName('run-2024', [])).toBe('run-2024-2'); // a year is not a copy number
    const long = 'x'.repeat(64);
    expect(cloneName(long, [])).toBe(`${'x'.repeat(62)}-2`);
  });
});
