//go:build !linux

package main

// evictPageCache does nothing outside Linux, whose page cache and peak
// RSS the memory tests know (pagecache_linux_test.go).
func evictPageCache(string) error { return nil }
