"""Array libraries (notebook 07, the array-dispatch page): ``runs``, one training on several
array libraries judged against NumPy by a derived bound; ``figures``, their loss curves and
gaps."""
