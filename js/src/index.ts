/**
 * JupyterLab front-end of jupyter-cleverthis: a "Training" panel in the left area (clusters, the job list,
 * Create Job), a main-area tab per opened job, job-end notifications, and the commands of the palette.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { CommandIDs, PALETTE_COMMANDS, addCommands, confirmCancel, confirmStop, dashboardUrl, notify } from './commands';
import { dataLineOpener } from './dataLines';
import { JobTabs } from './jobTabs';
import { JobNotifier } from './notifier';
import { DEFAULT_REFRESH_INTERVAL, TrainingPanel } from './panel';
import { RestTransport } from './shared/restTransport';

export * from './shared';
export { RestTransport, API_PATH } from './shared/restTransport';
export { TrainingPanel, DEFAULT_REFRESH_INTERVAL } from './panel';
export { CreateJobDialog, showCreateJobDialog } from './dialog';
export { JobTab } from './jobTab';
export { CommandIDs } from './commands';
export { trainingIcon } from './icon';
export { JobNotifier } from './notifier';

/** The plugin id; also the settings schema id (`schema/plugin.json`). */
export const PLUGIN_ID = 'jupyter-cleverthis:plugin';

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
    const settings = { notifications: true };

    const notifier = new JobNotifier({
      transport,
      notify: notice => notify(app, notice),
      enabled: () => settings.notifications
    });
    const dataLines = dataLineOpener(app, () => transport.serverRoot);
    const tabs = new JobTabs(app, {
      transport,
      confirmCancel,
      dataLines,
      onClone: job => void commands.execute(CommandIDs.cloneJob, { cluster: job.cluster, name: job.name }),
      onPrefetch: job => void commands.execute(CommandIDs.prefetchModel, { cluster: job.cluster, model: job.base_model }),
      onRetryWith: (job, fix) =>
        void commands.execute(CommandIDs.cloneJob, { cluster: job.cluster, name: job.name, spec: fix.spec } as any),
      onExport: job => void commands.execute(CommandIDs.exportJob, { cluster: job.cluster, name: job.name }),
      onSaveTemplate: job => void commands.execute(CommandIDs.saveTemplate, { cluster: job.cluster, name: job.name }),
      onCompareTrials: (cluster, names) => void commands.execute(CommandIDs.compareJobs, { cluster, names }),
      onCreateFromBest: (cluster, sweep, spec) =>
        void commands.execute(CommandIDs.cloneJob, { cluster, name: sweep, spec } as any)
    });
    const panel = new TrainingPanel({
      transport,
      refreshInterval: DEFAULT_REFRESH_INTERVAL,
      onCreateJob: () => void commands.execute(CommandIDs.createJob),
      onOpenDashboard: cluster => void commands.execute(CommandIDs.openDashboard, { cluster }),
      onOpenJob: (cluster, name) => void commands.execute(CommandIDs.openJob, { cluster, name }),
      onCompareJobs: (cluster, names) => void commands.execute(CommandIDs.compareJobs, { cluster, names }),
      confirmStop,
      dashboardUrl: cluster => dashboardUrl(serverSettings.baseUrl, cluster),
      // The server's word for who asks: under token-only authentication Jupyter's own identity is a random id.
      currentUser: () => transport.user ?? app.serviceManager.user?.identity?.username
    });
    panel.title.caption = 'Training';
    shell.add(panel, 'left', { rank: 200 });

    addCommands(app, { panel, transport, notifier, tabs, dataLines });
    if (restorer) {
      restorer.add(panel, panel.id);
      tabs.restore(restorer, CommandIDs.openJob);
    }
    if (palette) {
      for (const command of PALETTE_COMMANDS) {
        palette.addItem({ command, category: CATEGORY });
      }
    }
    if (settingRegistry) {
      followSettings(app, settingRegistry, (interval, cluster, notifications) => {
        panel.refreshInterval = interval;
        tabs.refreshInterval = interval;
        panel.defaultCluster = cluster;
        settings.notifications = notifications;
      });
    }
    void app.restored.then(() => notifier.start());
  }
};

export default plugin;

/** Apply the `refreshInterval`, `defaultCluster` and `notifications` settings, now and on each change. */
function followSettings(
  app: JupyterFrontEnd,
  settingRegistry: ISettingRegistry,
  apply: (interval: number, cluster: string, notifications: boolean) => void
): void {
  const read = (settings: ISettingRegistry.ISettings) => {
    const interval = settings.get('refreshInterval').composite;
    const cluster = settings.get('defaultCluster').composite;
    apply(
      typeof interval === 'number' && interval > 0 ? interval : DEFAULT_REFRESH_INTERVAL,
      typeof cluster === 'string' ? cluster : '',
      settings.get('notifications').composite !== false
    );
  };
  Promise.all([settingRegistry.load(PLUGIN_ID), app.restored])
    .then(([settings]) => {
      read(settings);
      settings.changed.connect(read);
    })
    .catch(reason => {
      console.error(`${PLUGIN_ID}: cannot load the settings.`, reason);
    });
}
