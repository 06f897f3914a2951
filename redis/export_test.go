package redis

// Member is member, for the tests of package redis_test.
var Member = member
