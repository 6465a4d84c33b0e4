package load

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// errMalformed is a response the load generator cannot frame.
var errMalformed = errors.New("malformed response")

// readResponse reads one HTTP/1.1 response from r and discards its body. It
// frames the body by Content-Length or chunked encoding and reports whether
// the connection may be reused. It allocates nothing for the responses the
// harness's targets send.
func readResponse(r *bufio.Reader) (status int, keepAlive bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, fmt.Errorf("%w: status line %q", errMalformed, line)
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, false, fmt.Errorf("%w: status line %q", errMalformed, line)
		}
		status = status*10 + int(c-'0')
	}
	keepAlive = line[7] == '1' // HTTP/1.0 closes unless told otherwise
	length := int64(-1)
	chunked := false
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			length, err = parseLength(value)
			if err != nil {
				return 0, false, err
			}
		case asciiEqualFold(name, "transfer-encoding"):
			chunked = asciiContainsFold(value, "chunked")
		case asciiEqualFold(name, "connection"):
			if asciiContainsFold(value, "close") {
				keepAlive = false
			} else if asciiContainsFold(value, "keep-alive") {
				keepAlive = true
			}
		}
	}
	switch {
	case status/100 == 1 || status == 204 || status == 304:
	case chunked:
		err = discardChunked(r)
	case length >= 0:
		_, err = r.Discard(int(length))
	default:
		// Delimited by the end of the connection.
		_, err = io.Copy(io.Discard, r)
		keepAlive = false
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the body of a %d response: %w", status, err)
	}
	return status, keepAlive, nil
}

func parseLength(v []byte) (int64, error) {
	if len(v) == 0 || len(v) > 18 {
		return 0, fmt.Errorf("%w: content-length %q", errMalformed, v)
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: content-length %q", errMalformed, v)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

func discardChunked(r *bufio.Reader) error {
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("%w: chunk size %q", errMalformed, line)
		}
		if size == 0 {
			// Trailers, then the empty line.
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := r.Discard(int(size)); err != nil {
			return err
		}
		if _, err := r.Discard(2); err != nil { // CRLF after the chunk
			return err
		}
	}
}

// asciiEqualFold reports whether b equals the lowercase ASCII string s,
// ignoring case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// asciiContainsFold reports whether b contains the lowercase ASCII string s,
// ignoring case.
func asciiContainsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if asciiEqualFold(b[i:i+len(s)], s) {
			return true
		}
	}
	return false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
