import { describe, expect, it } from 'vitest';

import { JobDetailView } from '../src/shared';
import { IChatRequest } from '../src/shared/tryIt';
import { makeDetail } from './fixtures';

describe('Try it', () => {
  it('asks the clicked checkpoint, shows the pieces as they arrive, then how it was served', async () => {
    const asked: IChatRequest[] = [];
    let release: () => void = () => undefined;
    const view = new JobDetailView({
      showLossCurve: false,
      onChat: async (_job, request, onText) => {
        asked.push(request);
        onText(0, 'Rivers ');
        await new Promise<void>(resolve => (release = resolve));
        onText(0, 'flow.');
        return [{ label: request.sources[0], text: 'Rivers flow.', served_as: 'merged weights', new_tokens: 3, seconds: 0.5 }];
      }
    });
    view.setJob(makeDetail());
    const item = view.node.querySelector('li[data-checkpoint="epoch-1"]')!;
    item.querySelector<HTMLButtonElement>('.jp-CleverThis-JobDetail-tryIt-button')!.click();
    const panel = view.node.querySelector<HTMLElement>('.jp-CleverThis-JobDetail-tryIt')!;
    expect(panel.style.display).toBe('');
    panel.querySelector<HTMLButtonElement>('.jp-CleverThis-JobDetail-tryIt-ask')!.click();
    expect(panel.querySelector('[role="status"]')!.textContent).toBe('Write a prompt first.');
    panel.querySelector('textarea')!.value = 'Tell me about rivers';
    const answered = (async () => panel.querySelector<HTMLButtonElement>('.jp-CleverThis-JobDetail-tryIt-ask')!.click())();
    await answered;
    await Promise.resolve();
    const answer = panel.querySelector('.jp-CleverThis-JobDetail-tryIt-answer')!;
    expect(answer.textContent).toBe('Rivers '); // the first piece, before the rest is generated
    release();
    await new Promise(r => setTimeout(r, 0));
    expect(answer.textContent).toBe('Rivers flow.');
    expect(panel.querySelector('[role="status"]')!.textContent).toBe('epoch-1: merged weights \u00b7 3 tokens \u00b7 0.5 s');
    expect(asked).toEqual([
      { prompt: 'Tell me about rivers', sources: ['epoch-1'], max_new_tokens: 64, temperature: 0, top_p: 1, serve: 'merged' }
    ]);
  });
});
