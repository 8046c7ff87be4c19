package agent

// SiteBrokerOptions configure the site's MQTT broker. Not built yet.
type SiteBrokerOptions struct{}
