"""One comparison, start to finish: the plan settled before any server starts, the schedule of
arms and blocks, and the loop that launches, preflights and scores."""
