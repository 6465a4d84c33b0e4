package framing_test

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// tape turns fuzz input into generator choices; past its end every choice
// is the first option.
type tape struct {
	b []byte
	i int
}

func (t *tape) next() byte {
	if t.i >= len(t.b) {
		return 0
	}
	c := t.b[t.i]
	t.i++
	return c
}

func (t *tape) intn(n int) int { return int(t.next()) % n }

// oneIn is true once in n choices.
func (t *tape) oneIn(n int) bool { return t.intn(n) == n-1 }

func pick[T any](t *tape, options ...T) T { return options[t.intn(len(options))] }

// rarely picks from rare once in n choices, and from usual otherwise, so
// that most streams get past their first request.
func rarely(t *tape, n int, usual, rare []string) string {
	if t.oneIn(n) {
		return pick(t, rare...)
	}
	return pick(t, usual...)
}

// genStream builds a pipelined stream of one to five requests from a small
// grammar that covers what decides HTTP/1 framing in net/http: versions,
// Content-Length and Transfer-Encoding fields with their odd spellings,
// obs-fold, bare LF, chunk extensions, trailers, CR/LF after a POST, and
// bodies that contain text looking like heads.
func genStream(t *tape) []byte {
	var s []byte
	for n := 1 + t.intn(5); n > 0; n-- {
		s = genRequest(t, s)
	}
	if t.oneIn(16) && len(s) > 0 {
		// An arbitrary corruption.
		s[t.intn(len(s))] = t.next()
	}
	return s
}

func genRequest(t *tape, s []byte) []byte {
	eol := func() string {
		if t.oneIn(6) {
			return "\n"
		}
		return "\r\n"
	}
	method := rarely(t, 30, []string{"GET", "POST", "POST", "PUT", "HEAD", "OPTIONS"}, []string{"PRI", "", "G\rT"})
	target := rarely(t, 30, []string{"/", "/a?b=c", "http://h/p"}, []string{"*", "", "/ /"})
	version := rarely(t, 20, []string{"HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/1.2"}, []string{"HTTP/2.0", "HTTP/0.9", "HTTP/1.1\r", "HTTP/11"})
	if method == "PRI" && t.oneIn(2) {
		target, version = "*", "HTTP/2.0"
	}
	s = append(s, method+" "+target+" "+version+eol()...)

	body := genBytes(t)
	atLeast11 := version != "HTTP/1.0" && version != "HTTP/0.9"
	clValue := strconv.Itoa(len(body))
	if !t.oneIn(4) {
		s = append(s, "Host: h"+eol()...)
	}
	hasCL, chunked := t.oneIn(2), t.oneIn(3)
	clAt, teAt := t.intn(4), t.intn(4)
	for i := range 4 {
		if hasCL && i == clAt {
			v := rarely(t, 8, []string{clValue, " " + clValue, " " + clValue + " \t", "0" + clValue, " " + strconv.Itoa(t.intn(20))},
				[]string{"", "+1", "99999999999999999999", "9223372036854775807", "1, 1", eol() + " " + clValue, " 1" + eol() + " 2"})
			s = append(s, pick(t, "Content-Length", "content-length", "CONTENT-LENGTH")+":"+v+eol()...)
			if t.oneIn(6) {
				s = append(s, "Content-Length: "+pick(t, clValue, "0"+clValue)+eol()...)
			}
		}
		if chunked && i == teAt {
			v := rarely(t, 8, []string{" chunked", " Chunked", "chunked  ", eol() + " chunked", eol() + " " + eol() + "\tchunked"},
				[]string{" gzip", " chunked, chunked", "", " chunked" + eol() + " ", " chunk ed", " chunked\x00"})
			s = append(s, pick(t, "Transfer-Encoding", "transfer-encoding", "TRANSFER-ENCODING")+":"+v+eol()...)
			if t.oneIn(10) {
				s = append(s, "Transfer-Encoding: chunked"+eol()...)
			}
		}
		if t.oneIn(2) {
			continue
		}
		s = append(s, rarely(t, 30, []string{
			"X-A: b",
			"Content-Type: text/plain",
			"Trailer: X-T",
			"Transfer-Encodings: chunked",
			"Content-Length-X: 5",
			"Transfer-Encoding : chunked",
			"Content-Length : 4",
			"Connection: keep-alive",
			"X-F: a" + eol() + " Transfer-Encoding: chunked",
			"X-G: a" + eol() + "\tContent-Length: 3",
			"C: d",
			"T: u",
			"Transfer-Encoding-X: chunked",
		}, []string{
			" Leading: space",
			"NoColon",
			": empty",
			"\rX: y",
			"X: \x01",
		})+eol()...)
	}
	s = append(s, eol()...)

	switch {
	case chunked && atLeast11:
		s = genChunked(t, s, body)
	case hasCL:
		s = append(s, body...)
	}
	if method == "POST" && t.oneIn(3) {
		s = append(s, pick(t, "\r\n", "\n", "\r\n\r\n", "\r\n\r\n\n")...)
	}
	return s
}

func genChunked(t *tape, s, body []byte) []byte {
	for len(body) > 0 {
		n := min(len(body), 1+t.intn(len(body)))
		hex := strconv.FormatInt(int64(n), 16)
		size := rarely(t, 30, []string{hex, strings.ToUpper(hex), "00" + hex}, []string{" " + hex, "0000000000000000" + hex, "x" + hex})
		ext := rarely(t, 30, []string{"", "", ";a=b", ";x", "; q=\"v\"", "\t", ";" + strings.Repeat("e", t.intn(200))}, []string{` ;bad`, ";\r"})
		s = append(s, size+ext+rarely(t, 30, []string{"\r\n"}, []string{"\n", "\r\r\n"})...)
		s = append(s, body[:n]...)
		s = append(s, rarely(t, 30, []string{"\r\n"}, []string{"\n", "", "\r"})...)
		body = body[n:]
	}
	s = append(s, pick(t, "0", "0", "000", "0;end")+"\r\n"...)
	switch t.intn(6) {
	case 0, 1, 2:
		s = append(s, "\r\n"...)
	case 3:
		s = append(s, "X-T: 1\r\nX-U: 2\r\n\r\n"...)
	case 4:
		s = append(s, pick(t, "\n", "X-T: 1\n\n", "X-T: 1\n\r\n", "X-T: 1\r\n\n")...)
	case 5:
		s = append(s, "Transfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n"...)
	}
	return s
}

func genBytes(t *tape) []byte {
	var b []byte
	for n := t.intn(5); n > 0; n-- {
		b = append(b, pick(t,
			"abc",
			"\r\n",
			"\n\n",
			"\r\n\r\n",
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
			"GET / HTTP/1.1\r\n",
			"0\r\n\r\n",
			strings.Repeat("z", t.intn(256)),
		)...)
	}
	return b
}

// readSizes turns fuzz input into Read sizes; empty means whole reads.
func readSizes(b []byte) []int {
	var sizes []int
	for _, c := range b {
		sizes = append(sizes, int(c)%64+1)
	}
	return sizes
}

func seedTapes(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 64 {
		b := make([]byte, 200)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b, []byte{byte(rng.Uint32()), byte(rng.Uint32())})
		f.Add(b, []byte{0})
	}
}

// FuzzGrammar checks generated streams against net/http; see
// checkAgainstGo.
func FuzzGrammar(f *testing.F) {
	seedTapes(f)
	f.Fuzz(func(t *testing.T, choices, sizes []byte) {
		stream := genStream(&tape{b: choices})
		checkAgainstGo(t, stream, readSizes(sizes))
	})
}

// FuzzStream checks arbitrary bytes against net/http, and that the parser
// does not panic on them.
func FuzzStream(f *testing.F) {
	for _, tc := range flaggedCases {
		f.Add([]byte(tc.stream), []byte{0})
		f.Add([]byte(tc.stream), []byte{3, 17})
	}
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00"), []byte{0})
	f.Add(bytes.Repeat([]byte("\r\n"), 10), []byte{0})
	f.Fuzz(func(t *testing.T, stream, sizes []byte) {
		checkAgainstGo(t, stream, readSizes(sizes))
	})
}
