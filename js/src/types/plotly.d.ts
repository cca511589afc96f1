// Minimal typing of the plotly.js basic bundle (it ships no types).
declare module 'plotly.js-basic-dist-min' {
  const Plotly: {
    react(
      root: HTMLElement,
      data: Record<string, unknown>[],
      layout?: Record<string, unknown>,
      config?: Record<string, unknown>
    ): Promise<unknown>;
    purge(root: HTMLElement): void;
    Plots: { resize(root: HTMLElement): unknown };
  };
  export default Plotly;
}
