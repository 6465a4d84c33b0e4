package framing

import (
	"bytes"
	"sync/atomic"
)

// Limits of net/http's HTTP/1 server that decide where it stops reading a
// connection, and so where the parser must stop too.
const (
	// bufSize is the size of the bufio.Reader the server reads through. A
	// chunk-size line must fit in it, and a trailer section's CRLF CRLF must
	// be found within it.
	bufSize = 4096
	// maxChunkExcess is how much chunk-line overhead the server's chunked
	// reader tolerates beyond 16 bytes per chunk plus twice the chunk data.
	maxChunkExcess = 16 << 10
	// maxContentLength is the largest Content-Length strconv.ParseUint(s, 10, 63)
	// accepts.
	maxContentLength = 1<<63 - 1
)

// chunked is the only Transfer-Encoding net/http accepts, compared
// case-insensitively.
const (
	chunked    = "chunked"
	chunkedLen = uint8(len(chunked))
)

type state uint8

// The order matters: stMethod through stSkipLine are the states that read a
// request head or a trailer section, whose size is bounded.
const (
	stRequestStart state = iota // between requests
	stMethod                    // request line, up to the first space
	stTarget                    // request line, up to the second space
	stProto                     // request line, up to LF
	stLineStart                 // first byte of a field line or the empty line
	stLineCR                    // a line began with CR; LF must follow
	stName                      // a field name that may be Content-Length or Transfer-Encoding
	stValue                     // the value of a Content-Length or Transfer-Encoding field
	stSkipLine                  // the rest of any other line
	stBody                      // Content-Length body
	stChunkSize                 // chunk-size line, with extensions
	stChunkData                 // chunk data
	stChunkCR                   // CR after chunk data
	stChunkLF                   // LF after chunk data
	stPassthrough               // the stream is no longer HTTP/1 that net/http would serve
	stTooLarge                  // a request head went past maxHead: the rest is filler
)

// field is the kind of header field being read.
type field uint8

const (
	fieldNone field = iota
	fieldOther
	fieldContentLength
	fieldTransferEncoding
)

const (
	methodPOST uint8 = 1 << iota
	methodPRI
)

// parser follows a plaintext HTTP/1.x request stream the way net/http's
// server reads it (net/http readRequest, textproto.Reader.ReadMIMEHeader,
// readTransfer, fixLength and the chunked reader), without copying or
// buffering it. It only remembers what it needs to find the next request
// head: a few integers and flags.
//
// Where net/http would reject the stream, or stop reading it as HTTP/1, the
// parser goes to stPassthrough for good: net/http answers and closes such a
// connection itself (or hands it to HTTP/2), so nothing after that point is
// served as an HTTP/1 request. Where net/http would reject a head for reasons
// that do not touch framing (a bad URL, a bad Host, an invalid byte in an
// unrelated field), the parser carries on; being lenient there costs nothing,
// because no further request on the connection is served either way.
//
// A head is flagged only when net/http serves it: its Content-Length and
// Transfer-Encoding fields are ones net/http accepts.
//
// feed is not safe for concurrent use; flag may be loaded from any goroutine.
type parser struct {
	// flag is the published finding: Reason | request<<8, or zero.
	flag atomic.Uint64
	// held is a finding made while a trailer's lookahead is unresolved. It
	// is published when the lookahead succeeds and dropped if it fails.
	held uint64

	remain  uint64 // bytes left in a Content-Length body or a chunk
	num     uint64 // Content-Length value or chunk size being parsed
	clFirst uint64 // the first Content-Length value of the head
	excess  int64  // chunk overhead, counted as net/http's chunkedReader does

	size     uint32 // bytes of the current head, trailer section or chunk-size line
	maxHead  uint32 // the most bytes a request head may have
	digits   uint32 // digits in num
	clDigits uint32 // digits in clFirst; net/http compares the strings
	requests uint32 // request heads completed

	window uint16 // bytes left in which the pending lookahead must succeed
	match  uint8  // length of the "\r\n\r\n" prefix the lookahead has seen

	state   state
	skip    uint8 // CR or LF bytes the server discards before the next request line
	mlen    uint8 // method length, saturating
	method  uint8 // methodPOST and methodPRI while the method may still be one of them
	tlen    uint8 // request-target length, saturating at 2
	ppos    uint8 // bytes of the HTTP-version seen
	major   uint8
	minor   uint8
	field   field // field being read; for obs-fold, the one before it
	nidx    uint8 // bytes of the field name matched
	vstate  uint8 // value parser state: Content-Length phase, "chunked" bytes matched, chunk-size phase
	clCount uint8 // Content-Length fields, saturating
	teCount uint8 // Transfer-Encoding fields, saturating

	post      bool // the request in progress is a POST
	pri       bool // the method is PRI
	star      bool // the request-target begins with '*'
	http10    bool // HTTP/1.0: Transfer-Encoding is ignored
	pri20     bool // "PRI * HTTP/2.0"
	trailer   bool // the lines being read are a trailer section
	firstLine bool // no field line yet in this head or trailer section
	colon     bool // the current field line has a colon
	cr        bool // the previous byte of the current line was CR
	prevCRLF  bool // the last complete line ended in CRLF
	vbad      bool // the value being parsed is invalid
	clErr     bool // net/http rejects this head's Content-Length
	teChunked bool // the last Transfer-Encoding value was "chunked"
	pending   bool // a trailer's lookahead is unresolved
}

// feed follows b, the next bytes of the stream. It returns len(b), or the
// offset in b of the first byte past the limit of a request head, where the
// stream must be cut (see stTooLarge).
func (p *parser) feed(b []byte) int {
	if p.pending {
		p.lookahead(b)
	}
	all := len(b)
	for len(b) > 0 {
		st := p.state
		var n int
		switch st {
		case stPassthrough, stTooLarge:
			return all
		case stRequestStart:
			n = p.requestStart(b)
		case stMethod:
			n = p.methodBytes(b)
		case stTarget:
			n = p.targetBytes(b)
		case stProto:
			n = p.protoBytes(b)
		case stLineStart:
			n = p.lines(b)
		case stLineCR:
			n = 1
			if b[0] != '\n' {
				p.passthrough()
				break
			}
			p.endSection(true, b[1:])
		case stName:
			n = p.nameBytes(b)
		case stValue:
			n = p.valueBytes(b)
		case stSkipLine:
			n = p.skipLine(b)
		case stBody:
			n = int(min(p.remain, uint64(len(b))))
			p.remain -= uint64(n)
			if p.remain == 0 {
				p.endMessage()
			}
		case stChunkSize:
			n = p.chunkSize(b)
		case stChunkData:
			n = int(min(p.remain, uint64(len(b))))
			p.remain -= uint64(n)
			if p.remain == 0 {
				p.state = stChunkCR
			}
		case stChunkCR:
			n = 1
			if b[0] != '\r' {
				p.passthrough()
				break
			}
			p.state = stChunkLF
		case stChunkLF:
			n = 1
			if b[0] != '\n' {
				p.passthrough()
				break
			}
			p.beginChunkLine()
		}
		if st >= stMethod && st <= stSkipLine && st != stLineStart {
			p.count(n)
		}
		if p.inSection() && p.size > p.limit() {
			// lines can stop at the end of b past the limit, and
			// count only adds: either way p.size holds every byte
			// of the section up to here.
			p.exceeded()
		}
		if p.state == stTooLarge {
			// p.size counts every byte of the head up to the end of
			// this step, so the first byte past the limit is this many
			// bytes before that end.
			return all - len(b) + n - int(p.size-p.maxHead)
		}
		b = b[n:]
	}
	return all
}

// inSection reports whether the parser is inside a head or a trailer
// section, whose size is bounded.
func (p *parser) inSection() bool {
	return p.state >= stMethod && p.state <= stSkipLine
}

// count adds n bytes to the head or trailer section being read.
func (p *parser) count(n int) {
	if !p.inSection() {
		return // the section ended; endSection counted its last byte
	}
	p.size += uint32(n)
}

// limit is the most bytes of the current head or trailer section that can
// be read before its end.
func (p *parser) limit() uint32 {
	if p.trailer {
		// readTrailer wants CRLF CRLF within bufSize bytes, and the
		// section ends at or before it: with bufSize bytes read and no
		// end, it has failed.
		return bufSize - 1
	}
	return p.maxHead
}

// exceeded handles a head or trailer section that grew past its limit.
// net/http fails a trailer section itself, so the parser stops following.
// A request head past maxHead goes to stTooLarge: the Conn cuts the stream
// there, so that net/http refuses the head with its own 431 at exactly the
// limit rather than up to 4 KiB later (see Conn.Read). While a trailer's
// lookahead is unresolved, net/http may still fail that trailer on the bytes
// past the cut, so the parser only stops following then.
func (p *parser) exceeded() {
	if p.trailer || p.pending {
		p.passthrough()
		return
	}
	p.state = stTooLarge
}

// passthrough stops following the stream. A pending trailer lookahead runs
// on: it alone decides whether the heads between that trailer and this
// point were served.
func (p *parser) passthrough() {
	p.state = stPassthrough
}

// done reports whether the parser has nothing left to do.
func (p *parser) done() bool {
	return p.state >= stPassthrough && !p.pending
}

func (p *parser) raise(r Reason) {
	v := uint64(r) | uint64(p.requests)<<8
	if p.pending {
		if p.held == 0 {
			p.held = v
		}
		return
	}
	if p.flag.Load() == 0 {
		p.flag.Store(v)
	}
}

// requestStart skips the CR and LF bytes net/http discards after a POST
// (up to four: it peeks four bytes) and begins a request.
func (p *parser) requestStart(b []byte) int {
	i := 0
	for p.skip > 0 && i < len(b) && (b[i] == '\r' || b[i] == '\n') {
		p.skip--
		i++
	}
	if p.skip > 0 && i == len(b) {
		return i
	}
	p.skip = 0
	p.state = stMethod
	p.size = 0
	p.mlen, p.method, p.tlen, p.ppos = 0, methodPOST|methodPRI, 0, 0
	p.post, p.pri, p.star, p.http10, p.pri20 = false, false, false, false, false
	p.trailer, p.firstLine, p.field, p.cr = false, true, fieldNone, false
	p.clCount, p.teCount, p.clErr, p.teChunked = 0, 0, false, false
	return i
}

func (p *parser) methodBytes(b []byte) int {
	for i, c := range b {
		switch c {
		case ' ':
			if p.mlen == 0 {
				p.passthrough() // empty method
				return i + 1
			}
			p.post = p.mlen == 4 && p.method&methodPOST != 0
			p.pri = p.mlen == 3 && p.method&methodPRI != 0
			p.state = stTarget
			return i + 1
		case '\n':
			p.passthrough() // request line without a target
			return i + 1
		}
		if p.mlen >= 4 || c != "POST"[p.mlen] {
			p.method &^= methodPOST
		}
		if p.mlen >= 3 || c != "PRI"[p.mlen] {
			p.method &^= methodPRI
		}
		if p.mlen < 255 {
			p.mlen++
		}
	}
	return len(b)
}

func (p *parser) targetBytes(b []byte) int {
	end := bytes.IndexByte(b, ' ')
	seg := b
	if end >= 0 {
		seg = b[:end]
	}
	if bytes.IndexByte(seg, '\n') >= 0 {
		p.passthrough() // request line without a version
		return len(b)
	}
	if len(seg) > 0 {
		if p.tlen == 0 {
			p.star = seg[0] == '*'
		}
		p.tlen = uint8(min(int(p.tlen)+len(seg), 2))
	}
	if end < 0 {
		return len(b)
	}
	p.state = stProto
	return end + 1
}

// protoBytes reads the HTTP-version up to LF: "HTTP/" DIGIT "." DIGIT, and
// the CR that bufio.Reader.ReadLine drops before the LF.
func (p *parser) protoBytes(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			p.endRequestLine()
			return i + 1
		}
		ok := false
		switch pos := p.ppos; {
		case pos < 5:
			ok = c == "HTTP/"[pos]
		case pos == 5:
			ok, p.major = isDigit(c), c-'0'
		case pos == 6:
			ok = c == '.'
		case pos == 7:
			ok, p.minor = isDigit(c), c-'0'
		case pos == 8:
			ok = c == '\r'
		}
		if !ok {
			p.passthrough() // net/http answers a malformed version 400
			return i + 1
		}
		p.ppos++
	}
	return len(b)
}

func (p *parser) endRequestLine() {
	switch {
	case p.ppos < 8:
		p.passthrough()
		return
	case p.major == 1:
		p.http10 = p.minor == 0
	case p.major == 2 && p.minor == 0 && p.pri && p.tlen == 1 && p.star:
		// "PRI * HTTP/2.0" is the only other request the HTTP/1 server
		// accepts (http1ServerSupportsRequest). With fields it is served
		// like HTTP/1.1; without, it is the h2c preface.
		p.pri20 = true
	default:
		p.passthrough() // 505 and close
		return
	}
	p.state = stLineStart
}

// lines reads field lines, as textproto's readMIMEHeader and
// readContinuedLineSlice see them, until one needs a byte-by-byte state (a
// name that may be Content-Length or Transfer-Encoding, a folded value of
// one, a line starting with CR, a line cut by the end of b) or the section
// ends. It keeps p.size itself, line by line, since the end of a trailer
// section depends on it.
func (p *parser) lines(b []byte) int {
	limit := p.limit()
	i := 0
	for i < len(b) {
		if p.size > limit {
			p.exceeded()
			return i
		}
		p.cr = false
		c := b[i]
		switch c {
		case '\n':
			p.endSection(false, b[i+1:])
			return i + 1
		case '\r':
			p.size++
			p.state = stLineCR
			return i + 1
		case ' ', '\t':
			if p.firstLine {
				p.passthrough() // "malformed MIME header initial line"
				return i + 1
			}
			// obs-fold: a continuation of the previous field, joined to
			// it with one space.
			if p.field == fieldContentLength || p.field == fieldTransferEncoding {
				p.size++
				p.valueByte(' ', true)
				p.state = stValue
				return i + 1
			}
			n := p.skipRest(b[i:])
			if n < 0 {
				p.size += uint32(len(b) - i)
				return len(b)
			}
			p.size += uint32(n)
			i += n
			continue
		case ':':
			p.passthrough() // empty field name
			return i + 1
		}
		p.endField()
		p.firstLine = false
		// Only names starting with c or t can be ours.
		if !p.trailer {
			switch c | 0x20 {
			case 'c':
				p.size++
				p.field, p.nidx, p.state = fieldContentLength, 1, stName
				return i + 1
			case 't':
				p.size++
				p.field, p.nidx, p.state = fieldTransferEncoding, 1, stName
				return i + 1
			}
		}
		n := p.skipName(b[i:])
		p.size += uint32(n)
		i += n
		if p.state != stLineStart {
			return i
		}
	}
	p.state = stLineStart
	return i
}

// skipRest skips the rest of a line that has its colon, from b[0] on. It
// returns the bytes up to and including the LF, or -1 when b ends first,
// leaving the parser in stSkipLine.
func (p *parser) skipRest(b []byte) int {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		p.colon, p.cr, p.state = true, b[len(b)-1] == '\r', stSkipLine
		return -1
	}
	p.prevCRLF = nl > 0 && b[nl-1] == '\r'
	return nl + 1
}

// skipName finishes a field line that is not ours from b[0] on: the name up
// to the colon byte by byte, since names are short, then the rest of the
// line. It returns the bytes consumed; the parser is then at the start of
// the next line, or in stSkipLine when b ended first, or in stPassthrough.
func (p *parser) skipName(b []byte) int {
	p.field = fieldOther
	j := 0
	for j < len(b) && b[j] != ':' && b[j] != '\n' {
		j++
	}
	switch {
	case j == len(b):
		p.colon, p.cr, p.state = false, j > 0 && b[j-1] == '\r', stSkipLine
		return j
	case b[j] == '\n':
		p.passthrough() // field line without a colon
		return j + 1
	}
	n := p.skipRest(b[j:])
	if n < 0 {
		return len(b)
	}
	p.state = stLineStart
	return j + n
}

func (p *parser) nameBytes(b []byte) int {
	name := "content-length"
	if p.field == fieldTransferEncoding {
		name = "transfer-encoding"
	}
	for i, c := range b {
		switch {
		case c == ':':
			if int(p.nidx) == len(name) {
				p.state = stValue
				p.num, p.digits, p.vstate, p.vbad = 0, 0, 0, false
				return i + 1
			}
			p.field, p.colon, p.state = fieldOther, true, stSkipLine
			return i + 1
		case c == '\n':
			p.passthrough() // field line without a colon
			return i + 1
		case int(p.nidx) < len(name) && foldEqual(c, name[p.nidx]):
			p.nidx++
		default:
			// Not one of ours: a longer name, or one with a space before
			// the colon, which net/http keeps as a different key.
			return i + p.skipName(b[i:])
		}
	}
	return len(b)
}

// valueBytes reads a Content-Length or Transfer-Encoding value up to LF.
func (p *parser) valueBytes(b []byte) int {
	for i, c := range b {
		switch c {
		case '\n':
			p.prevCRLF, p.cr = p.cr, false
			p.state = stLineStart
			return i + 1
		case '\r':
			// Only a CR right before LF is part of the line ending; any
			// other is an invalid value byte.
			p.vbad = p.vbad || p.cr
			p.cr = true
			continue
		}
		if p.cr {
			p.vbad, p.cr = true, false
		}
		p.valueByte(c, false)
	}
	return len(b)
}

// valueByte feeds one byte of a value; fold is the space that stands for an
// obs-fold line break. textproto trims each line, joins folded lines with a
// space and trims the start of the value; fixLength then trims both ends of
// Content-Length, but parseTransferEncoding compares Transfer-Encoding as is,
// so "chunked" followed by a fold is not "chunked".
func (p *parser) valueByte(c byte, fold bool) {
	ws := c == ' ' || c == '\t'
	if p.field == fieldContentLength {
		switch {
		case ws:
			if p.vstate == 1 {
				p.vstate = 2 // trailing whitespace
			}
		case isDigit(c) && p.vstate < 2:
			p.vstate = 1
			d := uint64(c - '0')
			if p.num > (maxContentLength-d)/10 {
				p.vbad = true
			}
			p.num = p.num*10 + d
			p.digits++
		default:
			p.vbad = true
		}
		return
	}
	switch {
	case ws:
		if p.vstate != 0 && (fold || p.vstate != chunkedLen) {
			p.vbad = true
		}
	case p.vstate < chunkedLen && c|0x20 == chunked[p.vstate]:
		p.vstate++
	default:
		p.vbad = true
	}
}

// endField records the Content-Length or Transfer-Encoding field that just
// ended.
func (p *parser) endField() {
	switch p.field {
	case fieldContentLength:
		ok := !p.vbad && p.vstate != 0
		switch {
		case !ok:
			p.clErr = true
		case p.clCount == 0:
			p.clFirst, p.clDigits = p.num, p.digits
		case p.num != p.clFirst || p.digits != p.clDigits:
			// net/http allows repeated Content-Length fields only with
			// identical values, compared as strings: equal digit counts
			// and equal numbers.
			p.clErr = true
		}
		p.clCount = min(p.clCount+1, 2)
	case fieldTransferEncoding:
		p.teChunked = !p.vbad && p.vstate == chunkedLen
		p.teCount = min(p.teCount+1, 2)
	}
	p.field = fieldNone
}

func (p *parser) skipLine(b []byte) int {
	nl := bytes.IndexByte(b, '\n')
	line := b
	if nl >= 0 {
		line = b[:nl]
	}
	if !p.colon && bytes.IndexByte(line, ':') >= 0 {
		p.colon = true
	}
	if len(line) > 0 {
		p.cr = line[len(line)-1] == '\r'
	}
	if nl < 0 {
		return len(b)
	}
	if !p.colon {
		p.passthrough() // field line without a colon
		return nl + 1
	}
	p.prevCRLF, p.cr = p.cr, false
	p.state = stLineStart
	return nl + 1
}

// endSection handles the empty line that ends a head or a trailer section;
// crlf tells whether it was CRLF or a bare LF, rest is the stream after it.
func (p *parser) endSection(crlf bool, rest []byte) {
	if p.trailer {
		p.endTrailer(crlf, rest)
		return
	}
	// The LF that ends the head is its last byte: a head that ends one
	// byte past the limit is too large too.
	if p.size++; p.size > p.maxHead {
		p.exceeded()
		return
	}
	p.endField()
	p.requests++
	hasCL, hasTE := p.clCount > 0, p.teCount > 0
	chunked := hasTE && !p.http10
	switch {
	case p.clErr:
		p.passthrough() // 400
		return
	case chunked && (p.teCount != 1 || !p.teChunked):
		p.passthrough() // 501
		return
	}
	// Only a head net/http serves is flagged: a rejected one closes the
	// connection anyway.
	switch {
	case hasCL && hasTE:
		p.raise(ContentLengthWithTransferEncoding)
	case hasTE && p.http10:
		p.raise(TransferEncodingHTTP10)
	}
	switch {
	case p.pri20 && p.firstLine:
		// The h2c preface: the server hands the connection to HTTP/2,
		// or answers this one request and closes.
		p.passthrough()
	case chunked:
		p.excess = 0
		p.beginChunkLine()
	case hasCL && p.clFirst > 0:
		p.remain = p.clFirst
		p.state = stBody
	default:
		p.endMessage()
	}
}

func (p *parser) endMessage() {
	p.state = stRequestStart
	p.skip = 0
	if p.post {
		p.skip = 4
	}
}

func (p *parser) beginChunkLine() {
	p.state = stChunkSize
	p.size, p.num, p.digits, p.vstate, p.cr = 0, 0, 0, 0, false
}

// chunkSize reads a chunk-size line as net/http's readChunkLine,
// trimTrailingWhitespace, removeChunkExtension and parseHexUint do:
// CRLF only, no other CR, at most bufSize bytes, 1 to 16 hex digits,
// whitespace only at the end of the line or after a ';'.
func (p *parser) chunkSize(b []byte) int {
	for i, c := range b {
		p.size++
		if c == '\n' {
			if !p.cr || p.digits == 0 {
				p.passthrough()
				return i + 1
			}
			p.endChunkLine()
			return i + 1
		}
		if p.size >= bufSize || p.cr {
			p.passthrough() // line too long, or CR inside it
			return i + 1
		}
		if c == '\r' {
			p.cr = true
			continue
		}
		switch p.vstate {
		case 0: // size
			if h, ok := unhex(c); ok && p.digits < 16 {
				p.num = p.num<<4 | uint64(h)
				p.digits++
				continue
			}
			switch c {
			case ';':
				p.vstate = 2
			case ' ', '\t':
				p.vstate = 1
			default:
				p.passthrough()
				return i + 1
			}
		case 1: // whitespace after the size; "5 ;x" is invalid
			if c != ' ' && c != '\t' {
				p.passthrough()
				return i + 1
			}
		}
		// vstate 2: a chunk extension, ignored up to CRLF.
	}
	return len(b)
}

func (p *parser) endChunkLine() {
	// The same arithmetic as chunkedReader.beginChunk, including its
	// order: the last chunk ends the body even when over the limit.
	p.excess += int64(p.size)
	p.excess -= 16 + 2*int64(p.num)
	p.excess = max(p.excess, 0)
	if p.num == 0 {
		p.state = stLineStart
		p.trailer, p.firstLine, p.prevCRLF, p.cr, p.field = true, true, false, false, fieldNone
		p.size = 0
		return
	}
	if p.excess > maxChunkExcess {
		p.passthrough()
		return
	}
	p.remain = p.num
	p.state = stChunkData
}

// endTrailer ends a trailer section. body.readTrailer takes a leading CRLF
// as the end; otherwise it requires CRLF CRLF within bufSize bytes of the
// section's start before it parses the section, which may end earlier at a
// bare-LF empty line. Then the lookahead runs on past the section.
func (p *parser) endTrailer(crlf bool, rest []byte) {
	n := p.size + 1 // with this line's last byte
	switch {
	case crlf && (p.firstLine || p.prevCRLF):
		// A leading CRLF, or the section ends in CRLF CRLF.
	case p.pending:
		// An earlier lookahead has a nearer limit and has already
		// scanned all of this section, finding no CRLF CRLF.
	case n >= bufSize:
		p.passthrough()
		return
	default:
		p.pending, p.window, p.match = true, uint16(bufSize-n), 0
		if crlf {
			p.match = 2
		}
		p.endMessage()
		p.lookahead(rest)
		return
	}
	p.endMessage()
}

// lookahead scans b for the CRLF CRLF a pending trailer lookahead needs. Any
// finding made meanwhile is held: net/http reads up to the CRLF CRLF before
// it serves another request, so the outcome is known by then.
func (p *parser) lookahead(b []byte) {
	b = b[:min(len(b), int(p.window))]
	for _, c := range b {
		switch {
		case c == '\r':
			if p.match == 2 {
				p.match = 3
			} else {
				p.match = 1
			}
		case c == '\n' && p.match == 1:
			p.match = 2
		case c == '\n' && p.match == 3:
			p.pending = false
			if p.held != 0 {
				if p.flag.Load() == 0 {
					p.flag.Store(p.held)
				}
				p.held = 0
			}
			return
		default:
			p.match = 0
		}
	}
	p.window -= uint16(len(b))
	if p.window == 0 {
		// net/http fails the trailer and closes: nothing after it was
		// served.
		p.state, p.pending, p.held = stPassthrough, false, 0
	}
}

func foldEqual(c, lower byte) bool {
	if lower == '-' {
		return c == '-'
	}
	return c|0x20 == lower
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
