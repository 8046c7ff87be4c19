package store

// Key prefixes of the deploy templates and runbooks (one record each, by
// UUID).
const (
	DeployTemplatePrefix = "t/"
	RunbookPrefix        = "b/"
)
