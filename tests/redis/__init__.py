"""The Redis boundary (trunner/_redis/ and the Redis handle), on both tiers and on real
deployments."""
