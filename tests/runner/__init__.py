"""The duties of a runner and the runner itself: pool, fetching, acknowledgements,
heartbeats, leader chores, shutdown and recovery."""
