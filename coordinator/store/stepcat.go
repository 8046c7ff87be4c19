package store

// StepCatalogPrefix holds the step lists ramdisks offered at hello
// (a node's cached clean and deploy steps), one record per distinct
// list, named by a digest of its content: every node booted with the
// same ramdisk on the same kind of hardware refers to one record instead
// of carrying the list in its own (rewritten on every transition).
const StepCatalogPrefix = "c/"

// PlanCatalogPrefix holds the operations' plans, one record per distinct
// plan, named by a digest of its content: the node records of an
// operation name it instead of carrying it in each write.
const PlanCatalogPrefix = "pl/"
