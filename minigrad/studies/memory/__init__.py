"""Memory and time (notebook 06, the memory page): ``costs``, what an update costs in seconds
and bytes; ``explorer``, the constants of the memory theory that the page evaluates;
``figures``, where the peak goes, what an update costs, the planner's choice. The
measurement, the theory and the planner themselves are ``minigrad.analysis``'s."""
