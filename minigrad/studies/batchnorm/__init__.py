"""BatchNorm under accumulation (notebook 04, the BatchNorm page): ``divergence``, how far
accumulated BatchNorm is from full batch (forward, gradient, running statistics);
``training``, normalisation layers trained both ways and judged by the bound; ``explorer``,
the page's numbers; ``figures``, the notebook's figures."""
