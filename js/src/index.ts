/**
 * JupyterLab front-end of jupyter-cleverthis: a "Training" panel in the left
 * area to launch and monitor Ray training / fine-tuning jobs.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { showCreateJobDialog } from './dialog';
import { trainingIcon } from './icon';
import { DEFAULT_REFRESH_INTERVAL, TrainingPanel } from './panel';
import { RestTransport } from './shared/restTransport';
import { JobType } from './shared';

export * from './shared';
export { RestTransport, API_PATH } from './shared/restTransport';
export { TrainingPanel, DEFAULT_REFRESH_INTERVAL } from './panel';
export { CreateJobDialog, showCreateJobDialog } from './dialog';
export { trainingIcon } from './icon';

/** The plugin id; also the settings schema id (`schema/plugin.json`). */
export const PLUGIN_ID = 'jupyter-cleverthis:plugin';

/** Command ids. */
export namespace CommandIDs {
  export const createJob = 'cleverthis:create-job';
  export const refresh = 'cleverthis:refresh';
  export const openDashboard = 'cleverthis:open-dashboard';
}

/** Palette category of the commands. */
const CATEGORY = 'CleverThis Training';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Launch and monitor Ray training and fine-tuning jobs.',
  autoStart: true,
  optional: [ICommandPalette, ISettingRegistry, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    settingRegistry: ISettingRegistry | null,
    restorer: ILayoutRestorer | null
  ): void => {
    const serverSettings = app.serviceManager.serverSettings;
    const transport = new RestTransport({ serverSettings });
    const { commands, shell } = app;

    const panel = new TrainingPanel({
      transport,
      refreshInterval: DEFAULT_REFRESH_INTERVAL,
      onCreateJob: () => void commands.execute(CommandIDs.createJob),
      onOpenDashboard: cluster => void commands.execute(CommandIDs.openDashboard, { cluster }),
      confirmCancel: Private.confirmCancel,
      currentUser: () => app.serviceManager.user?.identity?.username
    });
    panel.title.caption = 'Training';
    shell.add(panel, 'left', { rank: 200 });
    if (restorer) {
      restorer.add(panel, panel.id);
    }

    Private.addCommands(app, panel, transport);
    if (palette) {
      for (const command of [CommandIDs.createJob, CommandIDs.refresh, CommandIDs.openDashboard]) {
        palette.addItem({ command, category: CATEGORY });
      }
    }
    if (settingRegistry) {
      Private.followSettings(app, settingRegistry, panel);
    }
  }
};

export default plugin;

namespace Private {
  /** The plugin's commands: Create Job, Refresh and Open Ray Dashboard. */
  export function addCommands(app: JupyterFrontEnd, panel: TrainingPanel, transport: RestTransport): void {
    const { commands, shell } = app;
    const serverSettings = app.serviceManager.serverSettings;
    commands.addCommand(CommandIDs.createJob, {
      label: 'Create Training Job\u2026',
      caption: 'Create a training or fine-tuning job on the selected cluster',
      icon: trainingIcon,
      execute: async args => {
        const cluster = (args.cluster as string | undefined) || panel.cluster;
        if (!cluster) {
          await showErrorMessage('No cluster', 'No Ray cluster is available to run the job on.');
          return null;
        }
        const jobType =
          args.job_type === 'train' || args.job_type === 'finetune'
            ? (args.job_type as JobType)
            : undefined;
        const created = await showCreateJobDialog({ transport, cluster, jobType });
        if (created) {
          shell.activateById(panel.id);
          if (panel.cluster !== cluster) {
            panel.cluster = cluster;
          }
          panel.showJob(created.name);
        }
        return created;
      }
    });

    commands.addCommand(CommandIDs.refresh, {
      label: 'Refresh Training Jobs',
      caption: 'Refresh the clusters and jobs of the Training panel',
      execute: () => panel.refresh()
    });

    commands.addCommand(CommandIDs.openDashboard, {
      label: 'Open Ray Dashboard',
      caption: 'Open the selected cluster\u2019s Ray dashboard in a new browser tab',
      execute: async args => {
        const cluster = (args.cluster as string | undefined) || panel.cluster;
        if (!cluster) {
          await showErrorMessage('No cluster', 'No Ray cluster is selected.');
          return null;
        }
        const url = dashboardUrl(serverSettings.baseUrl, cluster);
        window.open(url, '_blank', 'noopener');
        return url;
      }
    });
  }

  /** Apply the `refreshInterval` and `defaultCluster` settings, now and on each change. */
  export function followSettings(app: JupyterFrontEnd, settingRegistry: ISettingRegistry, panel: TrainingPanel): void {
    const apply = (settings: ISettingRegistry.ISettings) => {
      const interval = settings.get('refreshInterval').composite;
      const cluster = settings.get('defaultCluster').composite;
      panel.refreshInterval =
        typeof interval === 'number' && interval > 0 ? interval : DEFAULT_REFRESH_INTERVAL;
      panel.defaultCluster = typeof cluster === 'string' ? cluster : '';
    };
    Promise.all([settingRegistry.load(PLUGIN_ID), app.restored])
      .then(([settings]) => {
        apply(settings);
        settings.changed.connect(apply);
      })
      .catch(reason => {
        console.error(`${PLUGIN_ID}: cannot load the settings.`, reason);
      });
  }

  /** `<baseUrl>cleverthis/proxy/<cluster>/` */
  export function dashboardUrl(baseUrl: string, cluster: string): string {
    return URLExt.join(baseUrl, 'cleverthis/proxy', encodeURIComponent(cluster)) + '/';
  }

  export async function confirmCancel(job: { name: string }): Promise<boolean> {
    const result = await showDialog({
      title: 'Cancel job?',
      body: `Stop the job \u201c${job.name}\u201d on its Ray cluster?`,
      buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Cancel job' })]
    });
    return result.button.accept;
  }
}
