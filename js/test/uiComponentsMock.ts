// The real @jupyterlab/ui-components import .svg files; the panel and the tabs only need their icons.
// Test files use it as `vi.mock('@jupyterlab/ui-components', () => import('./uiComponentsMock'))`.
export class LabIcon {
  constructor(readonly options: { name: string; svgstr: string }) {}
  element(): HTMLElement {
    return document.createElement('span');
  }
}
const icon = { element: (): HTMLElement => document.createElement('span') };
export const launchIcon = icon;
export const refreshIcon = icon;
