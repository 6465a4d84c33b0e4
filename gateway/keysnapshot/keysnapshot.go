// Package keysnapshot is the format of the signed key snapshot, the fast
// lane's fallback: the key service's whole state (keys, deny entries,
// issuers' keys) as a portico.config.v1.KeySnapshot, marshalled and signed
// with Ed25519 over those bytes as they are, in a SignedKeySnapshot. The
// key service signs with it and nodes verify with it, so the two cannot
// drift apart. It does no I/O.
package keysnapshot

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	configv1 "github.com/portico-gw/portico/gen/portico/config/v1"
)

// Algorithm is the only signature algorithm of a snapshot.
const Algorithm = "Ed25519"

// Errors of a snapshot Verify refuses.
var (
	ErrBadSignature  = errors.New("signed snapshot: bad signature")
	ErrUnknownSigner = errors.New("signed snapshot: signed by a key the node does not trust")
	ErrMalformed     = errors.New("signed snapshot: malformed")
)

// SignerID names an Ed25519 public key: the first 16 hex digits of the
// SHA-256 of the key. It is the key_id of the snapshots it signs.
func SignerID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Sign returns snap signed with priv: a marshalled SignedKeySnapshot.
func Sign(priv ed25519.PrivateKey, snap *configv1.KeySnapshot) ([]byte, error) {
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(snap)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(&configv1.SignedKeySnapshot{
		Payload:   payload,
		Algorithm: Algorithm,
		KeyId:     SignerID(priv.Public().(ed25519.PublicKey)),
		Signature: ed25519.Sign(priv, payload),
	})
}

// Verify checks a SignedKeySnapshot's signature against the trusted keys
// and returns the KeySnapshot it carries.
func Verify(data []byte, trusted []ed25519.PublicKey) (*configv1.KeySnapshot, error) {
	var signed configv1.SignedKeySnapshot
	if err := proto.Unmarshal(data, &signed); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if signed.GetAlgorithm() != Algorithm {
		return nil, fmt.Errorf("%w: algorithm %q, want %s", ErrMalformed, signed.GetAlgorithm(), Algorithm)
	}
	var pub ed25519.PublicKey
	for _, k := range trusted {
		if SignerID(k) == signed.GetKeyId() {
			pub = k
			break
		}
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: key id %q", ErrUnknownSigner, signed.GetKeyId())
	}
	if len(signed.GetSignature()) != ed25519.SignatureSize || !ed25519.Verify(pub, signed.GetPayload(), signed.GetSignature()) {
		return nil, ErrBadSignature
	}
	snap := &configv1.KeySnapshot{}
	if err := proto.Unmarshal(signed.GetPayload(), snap); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	return snap, nil
}
