package framing_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/portico-gw/portico/gateway/internal/framing"
)

// replayConn's Read claims to fill b without writing to it. Benchmarks read
// into slices of the stream itself, so they measure the parser and not a
// copy.
type replayConn struct {
	net.Conn
}

func (replayConn) Read(b []byte) (int, error) { return len(b), nil }

// head is a typical 400-byte browser-ish request head with a small body.
var head = "POST /api/v1/orders?expand=items HTTP/1.1\r\n" +
	"Host: api.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
	"Accept: application/json\r\n" +
	"Accept-Language: en-US,en;q=0.5\r\n" +
	"Accept-Encoding: gzip, deflate, br\r\n" +
	"Content-Type: application/json\r\n" +
	"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJl\r\n" +
	"Cookie: session=0123456789abcdef; theme=dark\r\n" +
	"Connection: keep-alive\r\n" +
	"Content-Length: 27\r\n" +
	"\r\n" +
	`{"item":"book","count":1}` + "\r\n"

// benchmarkStream reads stream through a Conn in reads of at most size
// bytes, b.N times over, as one long keep-alive connection.
func benchmarkStream(b *testing.B, stream string, size int) {
	buf := []byte(stream)
	c := framing.NewConn(replayConn{}, framing.Options{})
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(buf); off += size {
			c.Read(buf[off:min(off+size, len(buf))])
		}
	}
	if err := c.Flagged(); err != nil {
		b.Fatalf("Flagged() = %v", err)
	}
}

func BenchmarkHead(b *testing.B) {
	benchmarkStream(b, head, 4096)
}

func BenchmarkPipelined(b *testing.B) {
	stream := head +
		"GET /a HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n" +
		"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Checksum: 1\r\n\r\n" +
		head +
		"GET /c HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nCache-Control: no-cache\r\n\r\n"
	benchmarkStream(b, stream, 4096)
}

// BenchmarkChunkedUpload is a 4 MiB upload in 16 KiB chunks, read in 32 KiB
// pieces as io.Copy reads a request body.
func BenchmarkChunkedUpload(b *testing.B) {
	chunk := strconv.FormatInt(16<<10, 16) + "\r\n" + strings.Repeat("d", 16<<10) + "\r\n"
	stream := "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat(chunk, 256) + "0\r\n\r\n"
	benchmarkStream(b, stream, 32<<10)
}

// BenchmarkSizedUpload is a 4 MiB upload with a Content-Length.
func BenchmarkSizedUpload(b *testing.B) {
	stream := "PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n" + strings.Repeat("d", 4<<20)
	benchmarkStream(b, stream, 32<<10)
}

// TestConnSize keeps a Conn, held for every idle keep-alive connection,
// small. It owns no other memory.
func TestConnSize(t *testing.T) {
	size := unsafe.Sizeof(framing.Conn{})
	t.Logf("unsafe.Sizeof(framing.Conn{}) = %d", size)
	if size > 128 {
		t.Errorf("unsafe.Sizeof(framing.Conn{}) = %d, want at most 128", size)
	}
}
