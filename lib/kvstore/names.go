package kvstore

// Names are the words a program's messages use: kvstore's errors name
// the program, its flags and its files the way its operator knows them.
type Names struct {
	// Program is who runs the store: "coordinator", "edge agent".
	Program string
	// DirFlag is the flag naming the program's data folder:
	// "--data-dir", "--state-dir".
	DirFlag string
	// Database is what the database is called: "the database", "the
	// outbox".
	Database string
	// KeyFile is what the key file is called: "database key file",
	// "outbox key file".
	KeyFile string
	// Exposed is added to the refusal of a key file others may read: what
	// a copied key means ("; if somebody else could have copied it, ...").
	Exposed string
	// RestoreKey is the advice for a key file of the wrong size.
	RestoreKey string
	// KeyMissing is the advice for a database whose key file is missing.
	KeyMissing string
	// Unencrypted is the refusal of a database written without
	// encryption (its folder is %s); "" when the program never wrote one.
	Unencrypted string
}

func (n Names) program() string  { return or(n.Program, "program") }
func (n Names) dirFlag() string  { return or(n.DirFlag, "its data folder") }
func (n Names) keyFile() string  { return or(n.KeyFile, "database key file") }
func (n Names) database() string { return or(n.Database, "the database") }

// or is s, or def when s is "".
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
