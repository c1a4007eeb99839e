// Small builders for prometheus::MetricFamily, used by the collector.
#pragma once

#include <prometheus/metric_family.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace tpool::metrics::detail {

using Labels = std::vector<prometheus::ClientMetric::Label>;

class Families {
 public:
  // Starts a family; samples added next belong to it.
  Families& counter(std::string name, std::string help) {
    return begin(std::move(name), std::move(help), prometheus::MetricType::Counter);
  }
  Families& gauge(std::string name, std::string help) {
    return begin(std::move(name), std::move(help), prometheus::MetricType::Gauge);
  }
  Families& histogram(std::string name, std::string help) {
    return begin(std::move(name), std::move(help), prometheus::MetricType::Histogram);
  }

  Families& value(double v, Labels labels = {}) {
    prometheus::ClientMetric m;
    m.label = std::move(labels);
    if (out_.back().type == prometheus::MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    out_.back().metric.push_back(std::move(m));
    return *this;
  }
  Families& hist(prometheus::ClientMetric::Histogram h, Labels labels = {}) {
    prometheus::ClientMetric m;
    m.label = std::move(labels);
    m.histogram = std::move(h);
    out_.back().metric.push_back(std::move(m));
    return *this;
  }

  std::vector<prometheus::MetricFamily> take() && { return std::move(out_); }

 private:
  Families& begin(std::string name, std::string help, prometheus::MetricType type) {
    prometheus::MetricFamily f;
    f.name = std::move(name);
    f.help = std::move(help);
    f.type = type;
    out_.push_back(std::move(f));
    return *this;
  }
  std::vector<prometheus::MetricFamily> out_;
};

}  // namespace tpool::metrics::detail
