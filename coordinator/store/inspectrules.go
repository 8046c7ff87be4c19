package store

// InspectionRulePrefix is the key prefix of the inspection rules (one
// record each, by UUID; coordinator/inspectrules).
const InspectionRulePrefix = "ir/"
