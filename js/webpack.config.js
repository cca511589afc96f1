// Merged into the @jupyter/builder (rspack) config of the labextension.
// plotly.js (~1 MB) is a lazily loaded chunk, only fetched when a loss curve
// is shown, so the asset-size hint is not useful.
module.exports = {
  performance: { hints: false }
};
