import { LabIcon } from '@jupyterlab/ui-components';

/** A rising-then-falling loss curve on axes; themed through the `jp-icon3` class. */
const TRAINING_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <path class="jp-icon3" fill="#616161" d="M3 3h2v16h16v2H3z"/>
  <polyline class="jp-icon3" stroke="#616161" style="fill:none" stroke-width="2" stroke-linejoin="round" stroke-linecap="round" points="7,6 10,12 13,10.5 16,14.5 20,16"/>
  <circle class="jp-icon-brand0" fill="#1976d2" cx="20" cy="16" r="1.8"/>
</svg>`;

export const trainingIcon = new LabIcon({
  name: 'jupyter-cleverthis:training',
  svgstr: TRAINING_SVG
});
