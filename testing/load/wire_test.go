package load

import (
	"bufio"
	"strings"
	"testing"
)

func TestReadResponse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in   string
		status     int
		keepAlive  bool
		wantErr    bool
		restPrefix string
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT", 200, true, false, "NEXT"},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\nTrailer: v\r\n\r\nNEXT", 200, true, false, "NEXT"},
		{"close", "HTTP/1.1 503 Service Unavailable\r\nconnection: Close\r\ncontent-length: 2\r\n\r\nhi", 503, false, false, ""},
		{"no body", "HTTP/1.1 204 No Content\r\n\r\nNEXT", 204, true, false, "NEXT"},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nall of it", 200, false, false, ""},
		{"garbage", "SSH-2.0-OpenSSH\r\n\r\n", 0, false, true, ""},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, false, true, ""},
		{"truncated", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReader(strings.NewReader(tc.in))
			status, keepAlive, err := readResponse(r)
			if (err != nil) != tc.wantErr || status != tc.status || keepAlive != tc.keepAlive {
				t.Fatalf("readResponse(%q) = %d, %v, %v; want %d, %v, error %v", tc.in, status, keepAlive, err, tc.status, tc.keepAlive, tc.wantErr)
			}
			if rest, _ := r.Peek(len(tc.restPrefix)); string(rest) != tc.restPrefix {
				t.Errorf("readResponse(%q) left %q, want %q next", tc.in, rest, tc.restPrefix)
			}
		})
	}
}
