"""Mixed precision (notebook 10, the mixed-precision page, ``minigrad precision``): ``sums``,
how precise a window's gradient sum is in each accumulator, against the exact sum;
``explorer``, the page's numbers."""
