"""Step accounting (notebook 05, the step-accounting page): ``pitfalls``, the wrong loops, one
thing of the update done per micro-batch at a time; ``explorer``, the page's numbers;
``figures``, the gap to full batch beside its bound, the update's size, the gradient's
noise."""
