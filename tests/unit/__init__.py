"""Values and pure logic: no Redis, or only the in-process one where a value needs it."""
