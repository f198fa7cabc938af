"""Token-level losses (notebook 13, the token-losses page): ``bound``, the rounding bound on a
token-level gradient of ``nn.CharMLP``; ``training``, full-batch and accumulated training
under each rule side by side with the parameter gap and its bound, the textbook rule's error
against the token-count spread, and padding against packing; ``sampling``, names drawn from a
trained model; ``explorer``, the page's numbers; ``figures``, the notebook's figures."""
