package apikey

import "hash/crc32"

// alphabet holds the base62 digits in order of value.
const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// digits maps a byte to its base62 value, or -1 if it is not a digit.
var digits = func() (d [256]int8) {
	for i := range d {
		d[i] = -1
	}
	for i := range len(alphabet) {
		d[alphabet[i]] = int8(i)
	}
	return d
}()

// crcTables are the tables of slicing-by-8 CRC-32 for the IEEE polynomial:
// crcTables[0] is the classic byte table, crcTables[k][b] the CRC of b
// followed by k zero bytes.
var crcTables = func() (t [8][256]uint32) {
	t[0] = *crc32.MakeTable(crc32.IEEE)
	for b := range 256 {
		c := t[0][b]
		for k := 1; k < 8; k++ {
			c = t[0][byte(c)] ^ c>>8
			t[k][b] = c
		}
	}
	return t
}()

// scan returns the CRC-32 (IEEE) of key[:sumAt], equal to
// crc32.ChecksumIEEE, and the OR of digits[c] over the body: negative if a
// body byte is outside the alphabet. key must be at least sumAt bytes long.
//
// crc32's own entry points call through a function variable, which makes
// their argument escape, so a key would have to be copied to the heap; and a
// byte at a time, each step waiting for the last, takes over 100 ns for the
// 40 bytes. Slicing-by-8 does 8 independent lookups per 8 bytes, and the
// digit lookups of the same bytes run while the CRC's chain waits.
func scan(key string) (uint32, int8) {
	t := &crcTables
	crc := ^uint32(0)
	var bad int8
	s := key[:sumAt]
	for i := 0; i < sumAt; i += 8 {
		w := s[i : i+8]
		crc ^= uint32(w[0]) | uint32(w[1])<<8 | uint32(w[2])<<16 | uint32(w[3])<<24
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][byte(crc>>24)] ^
			t[3][w[4]] ^ t[2][w[5]] ^ t[1][w[6]] ^ t[0][w[7]]
		if i >= prefixLen {
			bad |= digits[w[0]] | digits[w[1]] | digits[w[2]] | digits[w[3]] |
				digits[w[4]] | digits[w[5]] | digits[w[6]] | digits[w[7]]
		}
	}
	return ^crc, bad
}

// putChecksum writes sum into dst as sumLen base62 digits, most significant
// first, padded with '0'.
func putChecksum(dst []byte, sum uint32) {
	v := uint64(sum)
	for i := sumLen - 1; i >= 0; i-- {
		dst[i] = alphabet[v%62]
		v /= 62
	}
}
