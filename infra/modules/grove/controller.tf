################################################################################
# forest-controller: namespace, ConfigMap, enrollment Secret, and the release
################################################################################

resource "kubernetes_namespace_v1" "controller" {
  count = local.create ? 1 : 0

  metadata {
    name = var.controller_namespace
    labels = {
      "app.kubernetes.io/part-of" = "forest"
    }
  }

  depends_on = [talos_cluster_kubeconfig.this]
}

resource "kubernetes_config_map_v1" "controller" {
  count = local.create ? 1 : 0

  metadata {
    name      = "forest-controller"
    namespace = kubernetes_namespace_v1.controller[0].metadata[0].name
  }

  data = module.config.controller_config
}

resource "kubernetes_secret_v1" "controller_enrollment" {
  count = local.create && var.controller_enrollment_token != "" ? 1 : 0

  metadata {
    name      = "forest-controller-enrollment"
    namespace = kubernetes_namespace_v1.controller[0].metadata[0].name
  }

  data = {
    token = var.controller_enrollment_token
  }
}

# The chart is installed from this repository (charts/forest-controller), not from a chart registry: the
# module and the chart it was tested with change together. module.config refuses a plan whose chart's
# Chart.yaml version is not controller_chart_version, so a chart change is a reviewed version bump (and
# the version change is what makes the helm provider upgrade the release).
resource "helm_release" "controller" {
  count = local.create ? 1 : 0

  name      = "forest-controller"
  namespace = kubernetes_namespace_v1.controller[0].metadata[0].name
  chart     = module.config.controller_chart_path

  values = [yamlencode({
    image             = var.controller_image
    existingConfigMap = kubernetes_config_map_v1.controller[0].metadata[0].name
    enrollmentSecret  = try(kubernetes_secret_v1.controller_enrollment[0].metadata[0].name, "")
    # Deploy trigger: the pods roll exactly when the ConfigMap data changes. The hash covers the same
    # map as the ConfigMap, which has no accelerator keys unless accelerators_enabled is true.
    podAnnotations = {
      "forest.dev/config-sha256" = module.config.controller_config_sha256
    }
  })]
}
