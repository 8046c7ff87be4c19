package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Every member's data folder holds the same two secrets: db.key, which
// encrypts the store, the log and the snapshots (a snapshot made by one
// member is restored by another), and secret, from which the engine
// derives the credentials it hands to sites and ramdisks (a new leader
// must recognise the old one's). InitKeys makes them once; the operator
// copies them to every member before its first start.

// Files of the data folder (engine/backups' names).
const (
	keyFile = "db.key"
)

// InitKeys writes a new db.key and secret into dataDir (made if
// missing), mode 0600; it refuses when either exists.
func InitKeys(dataDir string) error {
	kp, sp := filepath.Join(dataDir, keyFile), filepath.Join(dataDir, secretFile)
	for _, p := range []string{kp, sp} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists; nothing was written (the cluster's secrets are made once: copy the existing ones to the other members)", p)
		}
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	key := make([]byte, 32)
	sec := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if _, err := rand.Read(sec); err != nil {
		return err
	}
	if err := writeFileSynced(kp, key); err != nil {
		return err
	}
	return writeFileSynced(sp, []byte(hex.EncodeToString(sec)))
}

// fingerprint tells members with the same db.key and secret from others
// without showing either: HMAC-SHA256 under db.key of the secret, first
// 8 bytes in hex.
func fingerprint(dataDir string) (string, error) {
	key, err := os.ReadFile(filepath.Join(dataDir, keyFile))
	if err != nil {
		return "", err
	}
	sec, err := os.ReadFile(filepath.Join(dataDir, secretFile))
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("bmedge cluster fingerprint\x00"))
	mac.Write(sec)
	return hex.EncodeToString(mac.Sum(nil)[:8]), nil
}

// needKeys refuses a member's start without the cluster's secrets.
func needKeys(dataDir string) error {
	for _, f := range []string{keyFile, secretFile} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the data folder %s has no %s: every member's data folder needs the cluster's db.key and secret before its first start. "+
				"Make them once with 'coordinator cluster init-keys --data-dir DIR' and copy both files (mode 0600) into every member's --data-dir", dataDir, f)
		} else if err != nil {
			return err
		}
	}
	return nil
}
