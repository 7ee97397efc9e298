//! SVG plots of a run (plotters' SVG backend: no fonts or native libraries needed).
