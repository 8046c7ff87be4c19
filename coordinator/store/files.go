package store

import (
	"log/slog"

	"github.com/bmedge/bmedge/lib/kvstore"
)

// KeySize is the size of the database's encryption key: 32 bytes select
// AES-256 in Badger.
const KeySize = kvstore.KeySize

// names word the shared store's errors for the coordinator (its data
// folder holds db.key and the database in db/).
var names = kvstore.Names{
	Program:    "coordinator",
	DirFlag:    "--data-dir",
	Database:   "the database",
	KeyFile:    "database key file",
	Exposed:    "; if somebody else could have copied it, the secrets in the database (BMC passwords) should be treated as exposed and changed",
	RestoreKey: "restore the original db.key from your backup of the data folder (the database cannot be read without it)",
	KeyMissing: "restore db.key from your backup of the data folder (the database cannot be read without it)",
	Unencrypted: "the database in %s was written by an earlier version without encryption at rest, and this version does not run an unencrypted database: " +
		"stop here, move the data folder away (it holds BMC passwords in the clear: destroy it once you no longer need it), start the coordinator with an empty --data-dir, " +
		"then register the sites and enroll the nodes again",
}

// LoadKey returns the database's encryption key from path, creating the
// file (KeySize random bytes, mode 0600) when it is absent and dbDir holds
// no database yet. A key file of the wrong size, or readable or writable
// by anybody but its owner, is an error: the key protects every BMC and
// rescue password at rest, so a key others could have read is not
// silently trusted (kvstore.LoadKey).
func LoadKey(path, dbDir string) ([]byte, error) {
	return kvstore.LoadKey(path, dbDir, names)
}

// Restrict makes root and everything under it private to the owner:
// folders 0700, files without any group or other permission. The umask
// that Open sets covers files created from then on; this covers files
// created before, by an earlier version or under another umask.
func Restrict(root string, log *slog.Logger) error {
	return kvstore.Restrict(root, log)
}
