package fsm

// planArgs is the payload of a plan action (ActPlanClean, ActPlanDeploy):
// the operator's steps, kept in the action until the ramdisk's steps are
// known and the plan is computed (planSteps). In the store they come
// back as decoded JSON, which AsObjects reads.
type planArgs struct {
	CleanSteps    []map[string]any // ActPlanClean: the manual clean list
	DeploySteps   []map[string]any // ActPlanDeploy: the request's deploy_steps
	TemplateSteps []map[string]any // ActPlanDeploy: the matching deploy templates' steps
}

const (
	planArgCleanSteps    = "clean_steps"
	planArgDeploySteps   = "deploy_steps"
	planArgTemplateSteps = "template_steps"
)

func planArgsOf(args map[string]any) planArgs {
	return planArgs{CleanSteps: AsObjects(args[planArgCleanSteps]), DeploySteps: AsObjects(args[planArgDeploySteps]),
		TemplateSteps: AsObjects(args[planArgTemplateSteps])}
}

// cleanPlanArgs is an ActPlanClean's args for the manual clean list.
func cleanPlanArgs(list []map[string]any) map[string]any {
	return map[string]any{planArgCleanSteps: list}
}

// deployPlanArgs is an ActPlanDeploy's args.
func deployPlanArgs(steps, templateSteps []map[string]any) map[string]any {
	return map[string]any{planArgDeploySteps: steps, planArgTemplateSteps: templateSteps}
}
